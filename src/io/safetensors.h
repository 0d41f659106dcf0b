// safetensors: strict reader (memory-mapped, zero-copy views) and streaming, sharded writer.
//
// File layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (the header), then the
// data. The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data) plus an optional "__metadata__" {string: string}.
// Validation matches the reference implementation (huggingface/safetensors) and is as strict:
// the tensors must tile the data section exactly (no overlap, no gap, no bytes past the last
// tensor), every byte count must equal numel x dtype size, names are unique. Every failure
// throws Error naming the file and, where there is one, the tensor.
//
// Memory: files are mmap'ed read-only; nothing is copied until a caller asks. A 230 GB
// checkpoint costs address space, not RAM (release() drops pages a streaming pass is done with).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4moe {

enum class Dtype { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64, kBool };

// The safetensors dtype string ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(Dtype dtype);
// Bytes per element.
int64_t dtype_size(Dtype dtype);
// nullopt for an unknown dtype string.
std::optional<Dtype> parse_dtype(std::string_view name);

// Largest header the reader accepts (the reference implementation uses the same bound).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0;          // byte offsets relative to the data section
  uint64_t end = 0;
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// "[4, 16]" for messages.
std::string shape_string(std::span<const int64_t> shape);

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section (8 + N)
  const TensorInfo* find(std::string_view name) const;
};

// Parses and validates the header of a safetensors file. `bytes` holds at least the first
// 8 + N bytes of the file, `file_size` is the whole file's size, `label` names the file in
// messages. Throws Error on any defect. This is the libFuzzer entry point (fuzz/).
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view label);

// A read-only view of one tensor's bytes inside a mapped file. The data pointer may be unaligned
// for the dtype (safetensors does not promise alignment): read multi-byte values with memcpy or
// the helpers below.
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  std::string_view file;  // the file it lives in, for messages
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(info->nbytes())}; }
};

// Converts `count` elements of a float tensor (F32, F16, BF16, F64) starting at element `first`
// into out. Throws Error naming the tensor for other dtypes.
void read_as_float(const TensorView& view, int64_t first, int64_t count, float* out);
// The value of a one-element F32 tensor (shape [] or [1]); Error naming the tensor otherwise.
float read_f32_scalar(const TensorView& view);

class MappedFile;

// One mapped safetensors file.
class SafetensorsFile {
 public:
  // Maps and validates; throws Error naming the path.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  uint64_t file_size() const;
  bool contains(std::string_view name) const { return header_.find(name) != nullptr; }
  // Throws Error naming the file and tensor when absent.
  TensorView tensor(std::string_view name) const;
  // Tells the kernel the pages of this tensor (or of bytes [offset, offset + bytes) of it) are no
  // longer needed, so a streaming pass keeps its resident memory bounded.
  void release(const TensorView& view) const;
  void release(const TensorView& view, uint64_t offset, uint64_t bytes) const;

 private:
  std::filesystem::path path_;
  std::string label_;
  std::unique_ptr<MappedFile> map_;
  SafetensorsHeader header_;
};

// A checkpoint directory: `model.safetensors.index.json` with its shards, or a single
// `*.safetensors` file. Validates that the index points at existing files and at tensors
// present in those shards, and that no tensor appears twice.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir);
  const std::filesystem::path& dir() const { return dir_; }
  // All tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const;
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  TensorView tensor(std::string_view name) const;       // Error naming the checkpoint when absent
  void release(const TensorView& view) const;
  void release(const TensorView& view, uint64_t offset, uint64_t bytes) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Tensors present in a shard but not listed in the index (the index wins; inspect reports them).
  const std::vector<std::string>& unindexed() const { return unindexed_; }
  bool has_index() const { return has_index_; }
  uint64_t total_file_bytes() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> index into files_
  std::vector<std::string> names_;
  std::vector<std::string> unindexed_;
  bool has_index_ = false;
};

// ---- Writing ----

struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::kBF16;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

// Streaming writer for a planned set of tensors. All tensors are declared up front (the header
// precedes the data), so each shard's layout is fixed before any data arrives; data is then
// written with pwrite at its planned offset, in any tensor order and in chunks, so memory holds
// only what the producer holds. Shards: greedy in declaration order, a new shard when the next
// tensor would push the current one past max_shard_bytes (a larger tensor gets a shard of its
// own). One shard: `model.safetensors`; several: `model-0000i-of-0000n.safetensors` plus
// `model.safetensors.index.json` ({"metadata": {"total_size"}, "weight_map"}), as Hugging Face
// writes them. Within a shard, tensors are ordered by decreasing dtype size so that every tensor
// starts aligned for its dtype (the header is padded with spaces to a multiple of 8). A checkpoint
// larger than the file system's free space is refused before any shard is created or replaced.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& dir, std::vector<TensorSpec> specs, uint64_t max_shard_bytes,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes to the tensor (after what was already written to it). Throws Error for an
  // unknown name or when the tensor would overflow its declared size.
  void write(std::string_view name, std::span<const uint8_t> bytes);
  // Checks every tensor is complete, writes the index, closes the files.
  void finish();
  int num_shards() const { return static_cast<int>(shards_.size()); }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct Planned {
    TensorSpec spec;
    int shard = 0;
    uint64_t offset = 0;  // absolute file offset
    uint64_t written = 0;
  };
  struct Shard {
    std::string file_name;
    int fd = -1;
  };
  std::filesystem::path dir_;
  std::vector<Planned> planned_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<Shard> shards_;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace fp4moe
