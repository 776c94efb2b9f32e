"""What every benchmark line records about the machine it ran on."""

import platform


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
