// Loads a t2t-keras export the way TF Serving's SavedModelBundle factory does (LoadSavedModel,
// tag "serve"; TF Text's op library loaded first, as the model server links it), then runs
// requests through its signatures by the tensor names in the SignatureDefs. No Python.
//
//   saved_model_loader EXPORT_DIR REQUESTS OP_LIBRARY...
//
// REQUESTS holds requests one after another, each:
//   "request <signature>\n", then per input "input <key> <count>\n" and <count> values, each
//   "<bytes>\n<the bytes>\n"; then "end\n".
// Prints one JSON object per request: {"output key": [values...], ...} (strings, floats, ints).
#include <dlfcn.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"

namespace {

struct Request {
  std::string signature;
  std::map<std::string, std::vector<std::string>> inputs;
};

bool ReadRequest(std::istream& in, Request* request) {
  std::string word;
  if (!(in >> word)) return false;
  if (word != "request" || !(in >> request->signature)) throw std::runtime_error("expected: request <signature>");
  while (in >> word && word != "end") {
    std::string key;
    size_t count;
    if (word != "input" || !(in >> key >> count)) throw std::runtime_error("expected: input <key> <count>");
    std::vector<std::string>& values = request->inputs[key];
    for (size_t i = 0; i < count; ++i) {
      size_t size;
      in >> size;
      in.get();  // the newline after the size
      std::string value(size, '\0');
      in.read(&value[0], size);
      values.push_back(value);
    }
  }
  return true;
}

std::string Quoted(const std::string& text) {
  std::ostringstream out;
  out << '"';
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out << '\\' << c;
    else if (c < 0x20) out << "\\u00" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
    else out << c;
  }
  out << '"';
  return out.str();
}

std::string Json(const tensorflow::Tensor& tensor) {
  std::ostringstream out;
  out << '[';
  for (int64_t i = 0; i < tensor.NumElements(); ++i) {
    if (i) out << ',';
    switch (tensor.dtype()) {
      case tensorflow::DT_STRING: out << Quoted(std::string(tensor.flat<tensorflow::tstring>()(i))); break;
      case tensorflow::DT_FLOAT: out << tensor.flat<float>()(i); break;
      case tensorflow::DT_INT32: out << tensor.flat<int32_t>()(i); break;
      case tensorflow::DT_BOOL: out << (tensor.flat<bool>()(i) ? "true" : "false"); break;
      default: out << "null";
    }
  }
  out << ']';
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: saved_model_loader EXPORT_DIR REQUESTS OP_LIBRARY...\n";
    return 2;
  }
  for (int i = 3; i < argc; ++i) {  // registers their ops, as a server built with them has them
    if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) {
      std::cerr << "cannot load " << argv[i] << ": " << dlerror() << "\n";
      return 1;
    }
  }
  tensorflow::SavedModelBundle bundle;
  tensorflow::Status status = tensorflow::LoadSavedModel(
      tensorflow::SessionOptions(), tensorflow::RunOptions(), argv[1], {"serve"}, &bundle);
  if (!status.ok()) {
    std::cerr << "LoadSavedModel: " << status.ToString() << "\n";
    return 1;
  }
  std::ifstream requests(argv[2], std::ios::binary);
  Request request;
  while (ReadRequest(requests, &request)) {
    const auto& signatures = bundle.meta_graph_def.signature_def();
    auto found = signatures.find(request.signature);
    if (found == signatures.end()) {
      std::cerr << "no signature " << request.signature << "\n";
      return 1;
    }
    std::vector<std::pair<std::string, tensorflow::Tensor>> feeds;
    for (const auto& [key, values] : request.inputs) {
      tensorflow::Tensor tensor(tensorflow::DT_STRING, tensorflow::TensorShape({static_cast<int64_t>(values.size())}));
      for (size_t i = 0; i < values.size(); ++i) tensor.vec<tensorflow::tstring>()(i) = values[i];
      feeds.emplace_back(found->second.inputs().at(key).name(), tensor);
    }
    std::vector<std::string> keys, names;
    for (const auto& [key, info] : found->second.outputs()) {
      keys.push_back(key);
      names.push_back(info.name());
    }
    std::vector<tensorflow::Tensor> outputs;
    status = bundle.session->Run(feeds, names, {}, &outputs);
    if (!status.ok()) {
      std::cerr << "Run(" << request.signature << "): " << status.ToString() << "\n";
      return 1;
    }
    std::cout << '{';
    for (size_t i = 0; i < keys.size(); ++i) std::cout << (i ? "," : "") << Quoted(keys[i]) << ':' << Json(outputs[i]);
    std::cout << "}\n";
    request = Request();
  }
  return 0;
}
