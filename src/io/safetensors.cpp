#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>

#include "common/error.h"
#include "format/bf16.h"

namespace fp4moe {

namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<DtypeEntry, 15> kDtypes = {{
    {Dtype::kF64, "F64", 8},
    {Dtype::kF32, "F32", 4},
    {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},
    {Dtype::kF8E4M3, "F8_E4M3", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kU8, "U8", 1},
    {Dtype::kI8, "I8", 1},
    {Dtype::kU16, "U16", 2},
    {Dtype::kI16, "I16", 2},
    {Dtype::kU32, "U32", 4},
    {Dtype::kI32, "I32", 4},
    {Dtype::kU64, "U64", 8},
    {Dtype::kI64, "I64", 8},
    {Dtype::kBool, "BOOL", 1},
}};

const DtypeEntry& dtype_entry(Dtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e;
  }
  fail("internal error: dtype ", static_cast<int>(dtype), " has no table entry");
}

// numel with overflow detection: nullopt when the product passes 2^62.
std::optional<int64_t> checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > (int64_t{1} << 62) / d) return std::nullopt;
    n *= d;
  }
  return n;
}

// SAX pass that finds duplicate keys at every nesting level (nlohmann's DOM keeps the last one
// silently; the reference implementation rejects the file). A separate pass, because nlohmann's
// callback parser rescans the parent object at every nested object's end: quadratic in the
// number of tensors (minutes for a 400k-tensor checkpoint).
struct DuplicateKeySax {
  std::vector<std::optional<std::unordered_set<std::string>>> stack;  // nullopt: inside an array
  std::string duplicate;
  using json = nlohmann::json;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    stack.emplace_back(std::in_place);
    return true;
  }
  bool key(std::string& k) {
    if (!stack.empty() && stack.back() && !stack.back()->insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool end_object() {
    if (!stack.empty()) stack.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    stack.emplace_back(std::nullopt);
    return true;
  }
  bool end_array() {
    if (!stack.empty()) stack.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};

// A JSON string literal (quotes and escapes) for a name, as the header writer needs it.
std::string json_quote(const std::string& text) { return nlohmann::json(text).dump(); }

// nlohmann's parse messages quote the offending input bytes; escape anything outside printable
// ASCII so a corrupt header cannot put raw binary on the user's terminal.
std::string printable(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace

std::string_view dtype_name(Dtype dtype) { return dtype_entry(dtype).name; }
int64_t dtype_size(Dtype dtype) { return dtype_entry(dtype).size; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return (it != tensors.end() && it->name == name) ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view label) {
  FP4MOE_CHECK(file_size >= 8 && bytes.size() >= 8, label, ": not a safetensors file: ", file_size,
               " bytes, too short for the 8-byte header length (truncated?)");
  const uint64_t header_len = read_u64_le(bytes.data());
  FP4MOE_CHECK(header_len <= kMaxSafetensorsHeaderBytes, label, ": header length ", header_len, " is larger than the ",
               kMaxSafetensorsHeaderBytes, "-byte limit (corrupt or not a safetensors file)");
  FP4MOE_CHECK(header_len <= file_size - 8, label, ": header length ", header_len, " exceeds the file size ", file_size,
               " (truncated or corrupt file)");
  FP4MOE_CHECK(header_len >= 2, label, ": header length ", header_len, " is too small for a JSON object");
  FP4MOE_CHECK(bytes.size() >= 8 + header_len, "internal error: ", label, ": header bytes not provided");
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  FP4MOE_CHECK(text[0] == '{', label, ": header does not start with '{' (not a safetensors JSON header)");

  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text, text + header_len);
  } catch (const nlohmann::json::exception& e) {
    fail(label, ": header is not valid JSON: ", printable(e.what()));
  }
  DuplicateKeySax sax;
  nlohmann::json::sax_parse(text, text + header_len, &sax);
  if (!sax.duplicate.empty()) fail(label, ": duplicate key '", printable(sax.duplicate), "' in the header");
  FP4MOE_CHECK(root.is_object(), label, ": header is not a JSON object");

  SafetensorsHeader header;
  header.data_start = 8 + header_len;
  const uint64_t data_size = file_size - header.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      FP4MOE_CHECK(v.is_object(), label, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        FP4MOE_CHECK(m.value().is_string(), label, ": __metadata__ entry '", m.key(), "' is not a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = std::string(label) + ": tensor '" + name + "'";
    FP4MOE_CHECK(v.is_object(), where, ": entry is not a JSON object");
    for (auto k = v.begin(); k != v.end(); ++k) {
      FP4MOE_CHECK(k.key() == "dtype" || k.key() == "shape" || k.key() == "data_offsets", where, ": unknown field '",
                   k.key(), "'");
    }
    FP4MOE_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
                 ": needs dtype, shape and data_offsets");
    TensorInfo t;
    t.name = name;
    FP4MOE_CHECK(v["dtype"].is_string(), where, ": dtype is not a string");
    const std::string dtype = v["dtype"].get<std::string>();
    std::optional<Dtype> parsed = parse_dtype(dtype);
    FP4MOE_CHECK(parsed.has_value(), where, ": unknown dtype '", dtype, "'");
    t.dtype = *parsed;
    FP4MOE_CHECK(v["shape"].is_array(), where, ": shape is not an array");
    for (const nlohmann::json& d : v["shape"]) {
      FP4MOE_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= (uint64_t{1} << 62), where,
                   ": shape entries must be non-negative integers, got ", d.dump());
      t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const nlohmann::json& off = v["data_offsets"];
    FP4MOE_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
                 ": data_offsets must be two non-negative integers, got ", off.dump());
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    FP4MOE_CHECK(t.begin <= t.end, where, ": data_offsets [", t.begin, ", ", t.end, "] are reversed");
    std::optional<int64_t> numel = checked_numel(t.shape);
    FP4MOE_CHECK(numel.has_value() && *numel <= (int64_t{1} << 62) / 8, where, ": shape ", shape_string(t.shape),
                 " is too large");
    const uint64_t expected = static_cast<uint64_t>(*numel) * static_cast<uint64_t>(dtype_size(t.dtype));
    FP4MOE_CHECK(t.end - t.begin == expected, where, ": data_offsets [", t.begin, ", ", t.end, "] hold ",
                 t.end - t.begin, " bytes, but shape ", shape_string(t.shape), " x ", dtype, " needs ", expected);
    FP4MOE_CHECK(t.end <= data_size, where, ": data_offsets [", t.begin, ", ", t.end,
                 "] run past the end of the data (", data_size, " bytes; truncated file?)");
    header.tensors.push_back(std::move(t));
  }

  // The tensors must tile [0, data_size) exactly: sort by offsets and walk.
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : header.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : (a->end != b->end ? a->end < b->end : a->name < b->name);
  });
  uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : by_offset) {
    FP4MOE_CHECK(t->begin >= cursor, label, ": tensor '", t->name, "' (bytes ", t->begin, "..", t->end,
                 ") overlaps tensor '", previous ? previous->name : "", "' (bytes ", previous ? previous->begin : 0,
                 "..", cursor, ")");
    FP4MOE_CHECK(t->begin == cursor, label, ": gap of ", t->begin - cursor, " bytes before tensor '", t->name,
                 "' (data_offsets must be contiguous)");
    cursor = t->end;
    previous = t;
  }
  FP4MOE_CHECK(cursor == data_size, label, ": ", data_size - cursor,
               " bytes after the last tensor are not covered by "
               "the header (the file is larger than its tensors)");
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return header;
}

void read_as_float(const TensorView& view, int64_t first, int64_t count, float* out) {
  const TensorInfo& t = *view.info;
  FP4MOE_CHECK(first >= 0 && count >= 0 && first + count <= t.numel(), view.file, ": tensor '", t.name,
               "': element range out of bounds");
  const uint8_t* p = view.data + first * dtype_size(t.dtype);
  switch (t.dtype) {
    case Dtype::kF32:
      std::memcpy(out, p, static_cast<size_t>(count) * 4);
      return;
    case Dtype::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      return;
    case Dtype::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_float(h);
      }
      return;
    case Dtype::kF64:
      for (int64_t i = 0; i < count; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return;
    default:
      fail(view.file, ": tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected a float dtype");
  }
}

float read_f32_scalar(const TensorView& view) {
  const TensorInfo& t = *view.info;
  FP4MOE_CHECK(t.dtype == Dtype::kF32 && t.numel() == 1 && t.shape.size() <= 1, view.file, ": tensor '", t.name,
               "' should be an F32 scalar, is ", dtype_name(t.dtype), " ", shape_string(t.shape));
  float v;
  std::memcpy(&v, view.data, 4);
  return v;
}

// ---- Mapping ----

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FP4MOE_CHECK(fd_ >= 0, path.string(), ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail(path.string(), ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) return;  // mmap of 0 bytes fails; the header parser reports the empty file
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd_);
      fail(path.string(), ": mmap failed: ", std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  void release(const uint8_t* begin, uint64_t bytes) const {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    uintptr_t lo = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
    uintptr_t hi = reinterpret_cast<uintptr_t>(begin) + bytes;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }

 private:
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), label_(path.string()), map_(std::make_unique<MappedFile>(path)) {
  static const uint8_t kEmpty[8] = {};
  std::span<const uint8_t> bytes =
      map_->size() ? std::span<const uint8_t>(map_->data(), map_->size()) : std::span<const uint8_t>(kEmpty, 0);
  header_ = parse_safetensors_header(bytes, map_->size(), label_);
}

SafetensorsFile::~SafetensorsFile() = default;

uint64_t SafetensorsFile::file_size() const { return map_->size(); }

TensorView SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* t = header_.find(name);
  FP4MOE_CHECK(t != nullptr, label_, ": no tensor '", name, "'");
  return TensorView{t, map_->data() + header_.data_start + t->begin, label_};
}

void SafetensorsFile::release(const TensorView& view) const { map_->release(view.data, view.info->nbytes()); }

void SafetensorsFile::release(const TensorView& view, uint64_t offset, uint64_t bytes) const {
  if (offset < view.info->nbytes()) map_->release(view.data + offset, std::min(bytes, view.info->nbytes() - offset));
}

// ---- Checkpoint directory ----

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& path) try {
  namespace fs = std::filesystem;
  FP4MOE_CHECK(fs::exists(path), path.string(), ": no such file or directory");
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (fs::is_regular_file(path)) {
    dir_ = path.parent_path();
    shard_names.push_back(path.filename().string());
  } else {
    dir_ = path;
    const fs::path index = path / "model.safetensors.index.json";
    if (fs::exists(index)) {
      has_index_ = true;
      nlohmann::json j;
      std::ifstream in(index);
      FP4MOE_CHECK(in.good(), index.string(), ": cannot open");
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        fail(index.string(), ": not valid JSON: ", printable(e.what()));
      }
      FP4MOE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
                   ": needs a \"weight_map\" object");
      std::set<std::string> distinct;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        FP4MOE_CHECK(it.value().is_string(), index.string(), ": weight_map entry '", it.key(), "' is not a string");
        const std::string file = it.value().get<std::string>();
        FP4MOE_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
                     index.string(), ": weight_map entry '", it.key(), "' names '", file,
                     "', which is not a plain file name in the checkpoint directory");
        weight_map[it.key()] = file;
        if (distinct.insert(file).second) {  // one stat per shard, not per tensor (a 397B index has ~370k entries)
          FP4MOE_CHECK(fs::is_regular_file(path / file), index.string(), ": tensor '", it.key(), "' is in shard '",
                       file, "', which does not exist in ", path.string());
          shard_names.push_back(file);
        }
      }
      FP4MOE_CHECK(!weight_map.empty(), index.string(), ": weight_map is empty");
    } else {
      for (const fs::directory_entry& e : fs::directory_iterator(path)) {
        if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename().string());
      }
      FP4MOE_CHECK(!shard_names.empty(), path.string(),
                   ": no model.safetensors.index.json and no *.safetensors file (not a checkpoint directory?)");
    }
  }
  std::sort(shard_names.begin(), shard_names.end());
  std::map<std::string, size_t> file_index;
  for (const std::string& name : shard_names) {
    file_index[name] = files_.size();
    files_.push_back(std::make_unique<SafetensorsFile>(dir_ / name));
  }
  if (has_index_) {
    for (const auto& [tensor, file] : weight_map) {
      const size_t i = file_index.at(file);
      FP4MOE_CHECK(files_[i]->contains(tensor), (dir_ / "model.safetensors.index.json").string(), ": tensor '", tensor,
                   "' is mapped to shard '", file, "', which has no such tensor");
      where_[tensor] = i;
    }
    for (const auto& f : files_) {
      for (const TensorInfo& t : f->header().tensors) {
        if (!where_.count(t.name)) unindexed_.push_back(f->path().filename().string() + ": " + t.name);
      }
    }
  } else {
    for (size_t i = 0; i < files_.size(); ++i) {
      for (const TensorInfo& t : files_[i]->header().tensors) {
        auto [it, inserted] = where_.emplace(t.name, i);
        FP4MOE_CHECK(inserted, dir_.string(), ": tensor '", t.name, "' appears in both ",
                     files_[it->second]->path().filename().string(), " and ", files_[i]->path().filename().string());
      }
    }
  }
  for (const auto& [name, i] : where_) names_.push_back(name);
} catch (const std::filesystem::filesystem_error& e) {
  fail(e.what());  // names the path and the OS error
}

bool SafetensorsCheckpoint::contains(std::string_view name) const { return where_.find(name) != where_.end(); }

const TensorInfo* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second]->header().find(name);
}

TensorView SafetensorsCheckpoint::tensor(std::string_view name) const {
  auto it = where_.find(name);
  FP4MOE_CHECK(it != where_.end(), dir_.string(), ": checkpoint has no tensor '", name, "'");
  return files_[it->second]->tensor(name);
}

void SafetensorsCheckpoint::release(const TensorView& view) const {
  auto it = where_.find(view.info->name);
  if (it != where_.end()) files_[it->second]->release(view);
}

void SafetensorsCheckpoint::release(const TensorView& view, uint64_t offset, uint64_t bytes) const {
  auto it = where_.find(view.info->name);
  if (it != where_.end()) files_[it->second]->release(view, offset, bytes);
}

uint64_t SafetensorsCheckpoint::total_file_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_) total += f->file_size();
  return total;
}

// ---- Writer ----

uint64_t TensorSpec::nbytes() const {
  std::optional<int64_t> n = checked_numel(shape);
  FP4MOE_CHECK(n.has_value(), "tensor '", name, "': shape ", shape_string(shape), " is invalid or too large");
  return static_cast<uint64_t>(*n) * static_cast<uint64_t>(dtype_size(dtype));
}

namespace {
void pwrite_all(int fd, const uint8_t* data, uint64_t bytes, uint64_t offset, const std::string& file) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, data, std::min<uint64_t>(bytes, 1u << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    FP4MOE_CHECK(n > 0, file, ": write failed: ", std::strerror(errno));
    data += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}
// The file names the writer gives shards: model.safetensors and model-0000i-of-0000n.safetensors.
bool is_writer_shard_name(const std::string& file) {
  return file == "model.safetensors" || (file.size() == 32 && file.compare(0, 6, "model-") == 0 &&
                                         file.compare(11, 4, "-of-") == 0 && file.compare(20, 12, ".safetensors") == 0);
}
}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& dir, std::vector<TensorSpec> specs,
                                     uint64_t max_shard_bytes, std::map<std::string, std::string> metadata)
    : dir_(dir) {
  namespace fs = std::filesystem;
  FP4MOE_CHECK(!specs.empty(), dir.string(), ": a checkpoint needs at least one tensor");
  FP4MOE_CHECK(max_shard_bytes > 0, "--max-shard-size must be > 0");
  if (!metadata.count("format")) metadata["format"] = "pt";  // transformers refuses files without it
  std::error_code ec;
  fs::create_directories(dir, ec);
  FP4MOE_CHECK(!ec && fs::is_directory(dir), dir.string(), ": cannot create the output directory: ", ec.message());

  // Shard assignment, greedy in declaration order.
  std::vector<std::vector<size_t>> shard_members(1);
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    FP4MOE_CHECK(s.name != "__metadata__" && !s.name.empty(), "invalid tensor name '", s.name, "'");
    FP4MOE_CHECK(by_name_.emplace(s.name, i).second, dir.string(), ": tensor '", s.name, "' is declared twice");
    const uint64_t bytes = s.nbytes();
    if (!shard_members.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shard_members.emplace_back();
      shard_bytes = 0;
    }
    shard_members.back().push_back(i);
    shard_bytes += bytes;
    total_bytes_ += bytes;
    planned_.push_back(Planned{std::move(specs[i]), static_cast<int>(shard_members.size()) - 1, 0, 0});
  }
  const int n = static_cast<int>(shard_members.size());
  std::vector<std::string> names(static_cast<size_t>(n)), headers(static_cast<size_t>(n));
  std::vector<uint64_t> file_bytes(static_cast<size_t>(n));
  uint64_t needed = 0;
  for (int s = 0; s < n; ++s) {
    char name[64];
    if (n == 1)
      std::snprintf(name, sizeof(name), "model.safetensors");
    else
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, n);
    names[static_cast<size_t>(s)] = name;
    std::vector<size_t>& members = shard_members[static_cast<size_t>(s)];
    // Larger elements first keeps every tensor aligned to its element size.
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      return dtype_size(planned_[a].spec.dtype) > dtype_size(planned_[b].spec.dtype);
    });
    // The header text is assembled directly, in data order: nlohmann's ordered_json inserts with a
    // linear search (quadratic for ~100k tensors per shard).
    std::string text = "{\"__metadata__\":" + nlohmann::json(metadata).dump();
    uint64_t offset = 0;
    for (size_t i : members) {
      const TensorSpec& spec = planned_[i].spec;
      const uint64_t bytes = spec.nbytes();
      text += "," + json_quote(spec.name) + ":{\"dtype\":\"" + std::string(dtype_name(spec.dtype)) +
              "\",\"shape\":" + nlohmann::json(spec.shape).dump() + ",\"data_offsets\":[" + std::to_string(offset) +
              "," + std::to_string(offset + bytes) + "]}";
      planned_[i].offset = offset;
      offset += bytes;
    }
    text += "}";
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    const uint64_t data_start = 8 + text.size();
    for (size_t i : members) planned_[i].offset += data_start;
    file_bytes[static_cast<size_t>(s)] = data_start + offset;
    needed += data_start + offset;
    headers[static_cast<size_t>(s)] = std::move(text);
  }
  // Refuse before creating anything when the checkpoint cannot fit: the shards are sized sparse, so a
  // full disk would otherwise show only hours into a large write. Shards of an earlier run here are
  // replaced, so their bytes count as free. (Where the file system cannot say, the writes' own errors remain.)
  const fs::space_info space = fs::space(dir, ec);
  if (!ec) {
    uint64_t replaced = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      std::error_code size_ec;
      const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
      if (!size_ec && is_writer_shard_name(e.path().filename().string())) replaced += size;
    }
    const uint64_t free_bytes = space.available > UINT64_MAX - replaced ? UINT64_MAX : space.available + replaced;
    FP4MOE_CHECK(needed <= free_bytes, dir.string(), ": the checkpoint needs ", needed, " bytes (", needed >> 30,
                 " GiB) and the file system has ", free_bytes, " (", free_bytes >> 30, " GiB) free for it");
  }
  for (int s = 0; s < n; ++s) {
    const std::string& text = headers[static_cast<size_t>(s)];
    Shard shard{names[static_cast<size_t>(s)], -1};
    const std::string path = (dir / shard.file_name).string();
    shard.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FP4MOE_CHECK(shard.fd >= 0, path, ": cannot create: ", std::strerror(errno));
    shards_.push_back(shard);
    uint8_t len[8];
    for (int b = 0; b < 8; ++b) len[b] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * b));
    pwrite_all(shard.fd, len, 8, 0, path);
    pwrite_all(shard.fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), 8, path);
    FP4MOE_CHECK(::ftruncate(shard.fd, static_cast<off_t>(file_bytes[static_cast<size_t>(s)])) == 0, path,
                 ": cannot size the file: ", std::strerror(errno));
  }
  // Shards and an index left by an earlier run into the same directory would be mixed up with
  // this checkpoint: remove files with the writer's own names that this run does not write.
  if (n == 1) fs::remove(dir / "model.safetensors.index.json", ec);
  std::set<std::string> current;
  for (const Shard& s : shards_) current.insert(s.file_name);
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (is_writer_shard_name(file) && !current.count(file)) fs::remove(e.path(), ec);
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  for (Shard& s : shards_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

void SafetensorsWriter::write(std::string_view name, std::span<const uint8_t> bytes) {
  FP4MOE_CHECK(!finished_, "SafetensorsWriter: write after finish");
  auto it = by_name_.find(name);
  FP4MOE_CHECK(it != by_name_.end(), dir_.string(), ": tensor '", name, "' was not declared");
  Planned& p = planned_[it->second];
  const uint64_t size = p.spec.nbytes();
  FP4MOE_CHECK(p.written + bytes.size() <= size, dir_.string(), ": tensor '", name, "': writing ", bytes.size(),
               " bytes after ", p.written, " overflows its ", size, " bytes");
  const Shard& shard = shards_[static_cast<size_t>(p.shard)];
  pwrite_all(shard.fd, bytes.data(), bytes.size(), p.offset + p.written, (dir_ / shard.file_name).string());
  p.written += bytes.size();
}

void SafetensorsWriter::finish() {
  FP4MOE_CHECK(!finished_, "SafetensorsWriter: finish called twice");
  for (const Planned& p : planned_) {
    FP4MOE_CHECK(p.written == p.spec.nbytes(), dir_.string(), ": tensor '", p.spec.name, "' got ", p.written, " of ",
                 p.spec.nbytes(), " bytes");
  }
  for (Shard& s : shards_) {
    FP4MOE_CHECK(::close(s.fd) == 0, (dir_ / s.file_name).string(), ": close failed: ", std::strerror(errno));
    s.fd = -1;
  }
  if (shards_.size() > 1) {
    nlohmann::json index;  // std::map keys: "metadata" before "weight_map", tensors sorted by name
    index["metadata"] = {{"total_size", total_bytes_}};
    nlohmann::json& weight_map = index["weight_map"];
    for (const Planned& p : planned_) weight_map[p.spec.name] = shards_[static_cast<size_t>(p.shard)].file_name;
    const std::filesystem::path path = dir_ / "model.safetensors.index.json";
    std::ofstream out(path);
    out << index.dump(2) << "\n";
    FP4MOE_CHECK(out.good(), path.string(), ": write failed");
  }
  finished_ = true;
}

}  // namespace fp4moe
