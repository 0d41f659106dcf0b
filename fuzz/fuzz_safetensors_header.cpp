// libFuzzer target for the safetensors header parser (io/safetensors.h): any input is treated as
// a whole safetensors file. The parser must either accept it, with every tensor inside the file
// and findable by name, or throw fp4moe::Error; any other exception, a crash or a sanitizer report
// is a bug. Built with -fsanitize=fuzzer,address,undefined (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fp4moe::SafetensorsHeader header = fp4moe::parse_safetensors_header({data, size}, size, "fuzz-input");
    uint64_t covered = 0;
    for (const fp4moe::TensorInfo& t : header.tensors) {
      if (t.begin > t.end || header.data_start + t.end > size) std::abort();  // validated tensors lie in the file
      if (header.find(t.name) != &t) std::abort();
      if (static_cast<uint64_t>(t.numel() * fp4moe::dtype_size(t.dtype)) != t.nbytes()) std::abort();
      covered += t.nbytes();
    }
    if (header.data_start + covered != size) std::abort();  // the tensors tile the data exactly
  } catch (const fp4moe::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
