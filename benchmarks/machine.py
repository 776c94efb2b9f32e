"""What every benchmark line records about the machine it ran on."""

import platform


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (/proc/cpuinfo): the name alone
    ("AMD EPYC") is the same for CPUs whose kernels differ; else what `platform` knows."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return f"{fields['model name']} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"
