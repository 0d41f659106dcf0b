// safetensors reader and writer: round trips over every dtype, sharding and the index, chunked
// writes, and a corpus of corrupted headers/files, each rejected with a message naming the file,
// the tensor and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace fp4moe {
namespace {

using test::safetensors_bytes;
using test::ScratchDir;

// Deterministic content for a tensor: byte i of tensor t is (i * 31 + t * 7) & 0xFF.
std::vector<uint8_t> pattern(uint64_t n, int t) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 31 + static_cast<uint64_t>(t) * 7) & 0xFF);
  return v;
}

std::vector<TensorSpec> all_dtype_specs() {
  return {{"f64", Dtype::kF64, {3}},      {"f32", Dtype::kF32, {2, 3}},    {"f16", Dtype::kF16, {5}},
          {"bf16", Dtype::kBF16, {4, 4}}, {"fp8", Dtype::kF8E4M3, {7, 2}}, {"e5m2", Dtype::kF8E5M2, {3}},
          {"u8", Dtype::kU8, {9}},        {"i8", Dtype::kI8, {1, 1, 3}},   {"u16", Dtype::kU16, {2}},
          {"i16", Dtype::kI16, {3}},      {"u32", Dtype::kU32, {1}},       {"i32", Dtype::kI32, {2, 2}},
          {"u64", Dtype::kU64, {2}},      {"i64", Dtype::kI64, {1}},       {"bool", Dtype::kBool, {5}},
          {"scalar", Dtype::kF32, {}},    {"empty", Dtype::kBF16, {0, 4}}};
}

TEST(Safetensors, DtypeTable) {
  EXPECT_EQ(dtype_size(Dtype::kBF16), 2);
  EXPECT_EQ(dtype_size(Dtype::kF8E4M3), 1);
  EXPECT_EQ(dtype_size(Dtype::kI64), 8);
  EXPECT_EQ(dtype_name(Dtype::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(parse_dtype("BOOL"), Dtype::kBool);
  EXPECT_FALSE(parse_dtype("F4").has_value());
  EXPECT_FALSE(parse_dtype("bf16").has_value());  // case matters in the format
}

TEST(Safetensors, RoundTripEveryDtypeSingleFile) {
  ScratchDir dir;
  const std::vector<TensorSpec> specs = all_dtype_specs();
  {
    SafetensorsWriter writer(dir.path(), specs, 1 << 20);
    EXPECT_EQ(writer.num_shards(), 1);
    // Written in reverse declaration order and in 3-byte chunks: the layout is independent of both.
    for (size_t i = specs.size(); i-- > 0;) {
      const std::vector<uint8_t> data = pattern(specs[i].nbytes(), static_cast<int>(i));
      for (size_t off = 0; off < data.size(); off += 3) {
        writer.write(specs[i].name,
                     std::span<const uint8_t>(data).subspan(off, std::min<size_t>(3, data.size() - off)));
      }
    }
    writer.finish();
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  SafetensorsCheckpoint ckpt(dir.path());
  ASSERT_EQ(ckpt.names().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorView v = ckpt.tensor(specs[i].name);
    EXPECT_EQ(v.info->dtype, specs[i].dtype) << specs[i].name;
    EXPECT_EQ(v.info->shape, specs[i].shape) << specs[i].name;
    const std::vector<uint8_t> want = pattern(specs[i].nbytes(), static_cast<int>(i));
    ASSERT_EQ(v.info->nbytes(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), v.data)) << specs[i].name;
    // Every tensor starts aligned to its element size in the file.
    const uint64_t file_offset = ckpt.files()[0]->header().data_start + v.info->begin;
    EXPECT_EQ(file_offset % static_cast<uint64_t>(dtype_size(v.info->dtype)), 0u) << specs[i].name;
  }
  EXPECT_EQ(ckpt.files()[0]->header().metadata.at("format"), "pt");
}

TEST(Safetensors, ShardsAndIndex) {
  ScratchDir dir;
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 10; ++i) {
    std::string name = "t";  // (not "t" + to_string: GCC 12 warns falsely on that, -Wrestrict)
    name += std::to_string(i);
    specs.push_back({name, Dtype::kF32, {100}});  // 400 bytes each
  }
  specs.push_back({"big", Dtype::kU8, {5000}});  // larger than a shard
  uint64_t total = 0;
  {
    SafetensorsWriter writer(dir.path(), specs, 1000);
    for (size_t i = 0; i < specs.size(); ++i)
      writer.write(specs[i].name, pattern(specs[i].nbytes(), static_cast<int>(i)));
    writer.finish();
    total = writer.total_bytes();
    EXPECT_EQ(writer.num_shards(), 6);  // 2 x 400 per shard (5 shards), then `big` alone
  }
  EXPECT_EQ(total, 10u * 400 + 5000);
  const nlohmann::json index = nlohmann::json::parse(test::read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), specs.size());
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00006.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00006-of-00006.safetensors");
  SafetensorsCheckpoint ckpt(dir.path());
  EXPECT_TRUE(ckpt.has_index());
  EXPECT_EQ(ckpt.files().size(), 6u);
  EXPECT_TRUE(ckpt.unindexed().empty());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorView v = ckpt.tensor(specs[i].name);
    const std::vector<uint8_t> want = pattern(specs[i].nbytes(), static_cast<int>(i));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), v.data)) << specs[i].name;
  }
  // Writing a single-shard checkpoint into the same directory replaces the shards and the index.
  {
    SafetensorsWriter writer(dir.path(), {{"only", Dtype::kU8, {3}}}, 1000);
    writer.write("only", std::vector<uint8_t>{1, 2, 3});
    writer.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00006.safetensors"));
  EXPECT_EQ(SafetensorsCheckpoint(dir.path()).names(), std::vector<std::string>{"only"});
  for (const auto& f : ckpt.files()) {
    uint64_t bytes = 0;
    for (const TensorInfo& t : f->header().tensors) bytes += t.nbytes();
    EXPECT_TRUE(bytes <= 1000 || f->header().tensors.size() == 1) << f->path();
  }
}

TEST(Safetensors, WriterRejectsMisuse) {
  ScratchDir dir;
  EXPECT_THROW(SafetensorsWriter(dir.path(), {{"a", Dtype::kF32, {1}}, {"a", Dtype::kF32, {1}}}, 100), Error);
  SafetensorsWriter writer(dir.path(), {{"a", Dtype::kF32, {2}}}, 100);
  const std::vector<uint8_t> four(4, 1), twelve(12, 1);
  EXPECT_THROW(writer.write("nope", four), Error);
  EXPECT_THROW(writer.write("a", twelve), Error);  // overflows the declared 8 bytes
  writer.write("a", four);
  try {
    writer.finish();
    FAIL() << "finish() accepted an incomplete tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a' got 4 of 8 bytes"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, WriterRefusesACheckpointLargerThanTheFreeSpace) {
  ScratchDir dir;
  {  // an earlier checkpoint in the directory, which a refused write must leave as it was
    SafetensorsWriter writer(dir.path(), {{"kept", Dtype::kU8, {3}}}, 1000);
    writer.write("kept", std::vector<uint8_t>{7, 8, 9});
    writer.finish();
  }
  const std::vector<uint8_t> before = test::read_file(dir / "model.safetensors");
  // 2 PiB in two shards: more than any file system this test runs on has free.
  const std::vector<TensorSpec> huge = {{"a", Dtype::kBF16, {int64_t{1} << 49}}, {"b", Dtype::kBF16, {int64_t{1} << 49}}};
  try {
    SafetensorsWriter writer(dir.path(), huge, uint64_t{1} << 50);
    FAIL() << "a 2 PiB checkpoint was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string prefix = dir.path().string() + ": the checkpoint needs ";
    ASSERT_EQ(what.rfind(prefix, 0), 0u) << what;
    const uint64_t needed = std::stoull(what.substr(prefix.size()));  // the data and the two shards' headers
    EXPECT_GT(needed, uint64_t{1} << 51) << what;
    EXPECT_LT(needed, (uint64_t{1} << 51) + 1024) << what;
    EXPECT_NE(what.find("free for it"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00002.safetensors"));
  EXPECT_EQ(test::read_file(dir / "model.safetensors"), before);
  EXPECT_EQ(SafetensorsCheckpoint(dir.path()).names(), std::vector<std::string>{"kept"});
}

TEST(Safetensors, ReadAsFloat) {
  ScratchDir dir;
  const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x8000};  // 1, -2, 65504, 2^-24, inf, -0
  const uint16_t bf16[] = {0x3F80, 0xC040};                                 // 1, -3
  const double f64[] = {0.5, -1e10};
  const float f32 = 0.1f;
  {
    SafetensorsWriter writer(dir.path(),
                             {{"h", Dtype::kF16, {6}},
                              {"b", Dtype::kBF16, {2}},
                              {"d", Dtype::kF64, {2}},
                              {"s", Dtype::kF32, {}},
                              {"u", Dtype::kU8, {1}}},
                             1 << 20);
    writer.write("h", {reinterpret_cast<const uint8_t*>(f16), sizeof(f16)});
    writer.write("b", {reinterpret_cast<const uint8_t*>(bf16), sizeof(bf16)});
    writer.write("d", {reinterpret_cast<const uint8_t*>(f64), sizeof(f64)});
    writer.write("s", {reinterpret_cast<const uint8_t*>(&f32), 4});
    writer.write("u", std::vector<uint8_t>{7});
    writer.finish();
  }
  SafetensorsCheckpoint ckpt(dir.path());
  float h[6], b[2], d[2];
  read_as_float(ckpt.tensor("h"), 0, 6, h);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h[4]) && h[4] > 0);
  EXPECT_TRUE(h[5] == 0.0f && std::signbit(h[5]));
  read_as_float(ckpt.tensor("b"), 0, 2, b);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -3.0f);
  read_as_float(ckpt.tensor("d"), 0, 2, d);
  EXPECT_EQ(d[0], 0.5f);
  EXPECT_EQ(d[1], -1e10f);
  EXPECT_EQ(read_f32_scalar(ckpt.tensor("s")), 0.1f);
  EXPECT_THROW(read_f32_scalar(ckpt.tensor("u")), Error);
  EXPECT_THROW(read_as_float(ckpt.tensor("u"), 0, 1, b), Error);
  EXPECT_THROW(read_as_float(ckpt.tensor("b"), 1, 2, b), Error);  // out of range
}

// Parses header text + data through the public parser and returns the error message ("" if valid).
std::string parse_error(const std::string& header, uint64_t data_bytes, int64_t file_size_delta = 0) {
  std::vector<uint8_t> bytes = safetensors_bytes(header, data_bytes);
  try {
    parse_safetensors_header(bytes, static_cast<uint64_t>(static_cast<int64_t>(bytes.size()) + file_size_delta),
                             "f.st");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& message, const std::vector<std::string>& parts) {
  ASSERT_FALSE(message.empty()) << "accepted a corrupt header";
  for (const std::string& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

TEST(SafetensorsCorrupt, ValidBaseline) {
  EXPECT_EQ(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})", 8), "");
  EXPECT_EQ(parse_error("{}", 0), "");                                                           // no tensors
  EXPECT_EQ(parse_error(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}   )", 0), "");  // padding
}

TEST(SafetensorsCorrupt, HeaderLength) {
  std::vector<uint8_t> tiny = {1, 2, 3};
  try {
    parse_safetensors_header(tiny, 3, "f.st");
    FAIL();
  } catch (const Error& e) {
    expect_error(e.what(), {"f.st", "too short"});
  }
  std::vector<uint8_t> huge(16, 0);
  huge[4] = 1;  // 2^32
  try {
    parse_safetensors_header(huge, 16, "f.st");
    FAIL();
  } catch (const Error& e) {
    expect_error(e.what(), {"f.st", "header length 4294967296", "limit"});
  }
  std::vector<uint8_t> past(16, 0);
  past[0] = 100;
  try {
    parse_safetensors_header(past, 16, "f.st");
    FAIL();
  } catch (const Error& e) {
    expect_error(e.what(), {"f.st", "header length 100 exceeds the file size 16"});
  }
}

TEST(SafetensorsCorrupt, Json) {
  expect_error(parse_error(R"({"a":{"dtype":"F32",)", 0), {"f.st", "not valid JSON"});
  expect_error(parse_error(R"([1,2])", 0), {"f.st", "does not start with '{'"});
  expect_error(parse_error(R"({"a":1})", 0), {"f.st", "tensor 'a'", "not a JSON object"});
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)", 4), {"not valid JSON"});
  expect_error(parse_error(R"({"__metadata__":{"k":1}})", 0), {"__metadata__", "'k'", "not a string"});
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":0}})", 4),
               {"tensor 'a'", "unknown field 'extra'"});
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[1]}})", 4),
               {"tensor 'a'", "needs dtype, shape and data_offsets"});
}

TEST(SafetensorsCorrupt, DtypeShapeOffsets) {
  expect_error(parse_error(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1),
               {"f.st", "tensor 'w'", "unknown dtype 'F7'"});
  expect_error(parse_error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               {"tensor 'w'", "hold 8 bytes", "[3] x F32 needs 12"});
  expect_error(parse_error(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "non-negative integers"});
  expect_error(parse_error(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), {"tensor 'w'"});
  expect_error(parse_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", 4), {"tensor 'w'", "reversed"});
  expect_error(parse_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 4),
               {"tensor 'w'", "data_offsets"});
  expect_error(parse_error(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "too large"});
}

TEST(SafetensorsCorrupt, LyingOffsetsOverlapGapsTruncation) {
  // Lying offsets: the tensor claims bytes past the end of the data (a truncated file).
  expect_error(parse_error(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
               {"f.st", "tensor 'w'", "run past the end of the data (8 bytes"});
  // Overlap.
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
               {"tensor 'b'", "overlaps tensor 'a'"});
  // Gap.
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
               {"gap of 4 bytes before tensor 'a'"});
  // Trailing bytes nobody owns.
  expect_error(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 10),
               {"6 bytes after the last tensor"});
  // Duplicate names (nlohmann would keep the last one silently).
  expect_error(parse_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           2),
               {"f.st", "duplicate key 'a'"});
}

TEST(SafetensorsCorrupt, FilesOnDisk) {
  ScratchDir dir;
  {
    SafetensorsWriter writer(dir / "ok", {{"a", Dtype::kF32, {4}}}, 1 << 20);
    writer.write("a", pattern(16, 0));
    writer.finish();
  }
  std::vector<uint8_t> good = test::read_file(dir / "ok" / "model.safetensors");
  // Truncated by 5 bytes.
  std::vector<uint8_t> cut(good.begin(), good.end() - 5);
  test::write_file(dir / "cut.safetensors", cut);
  try {
    SafetensorsFile f(dir / "cut.safetensors");
    FAIL();
  } catch (const Error& e) {
    expect_error(e.what(), {"cut.safetensors", "tensor 'a'", "run past the end"});
  }
  test::write_file(dir / "empty.safetensors", {});
  EXPECT_THROW(SafetensorsFile(dir / "empty.safetensors"), Error);
  EXPECT_THROW(SafetensorsFile(dir / "missing.safetensors"), Error);
  EXPECT_THROW(SafetensorsFile(dir.path()), Error);  // a directory
}

TEST(SafetensorsCorrupt, Index) {
  ScratchDir dir;
  {
    SafetensorsWriter writer(dir.path(), {{"a", Dtype::kF32, {4}}, {"b", Dtype::kF32, {4}}}, 16);
    writer.write("a", pattern(16, 0));
    writer.write("b", pattern(16, 1));
    writer.finish();
  }
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  const std::string original(reinterpret_cast<const char*>(test::read_file(index).data()),
                             test::read_file(index).size());
  auto expect_open_error = [&](const std::string& text, const std::vector<std::string>& parts) {
    test::write_text(index, text);
    try {
      SafetensorsCheckpoint c(dir.path());
      FAIL() << "accepted index " << text;
    } catch (const Error& e) {
      expect_error(e.what(), parts);
    }
  };
  expect_open_error(R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"gone.safetensors"}})",
                    {"model.safetensors.index.json", "tensor 'b'", "gone.safetensors", "does not exist"});
  expect_open_error(
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","zz":"model-00002-of-00002.safetensors"}})",
      {"tensor 'zz'", "model-00002-of-00002.safetensors", "has no such tensor"});
  expect_open_error(R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})", {"not a plain file name"});
  expect_open_error(R"({"weight_map": )", {"model.safetensors.index.json", "not valid JSON"});
  expect_open_error(R"({"metadata":{}})", {"weight_map"});
  // An index listing only "a": the checkpoint holds just "a" (the index is authoritative).
  test::write_text(index, R"({"weight_map":{"a":"model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(SafetensorsCheckpoint(dir.path()).names(), std::vector<std::string>{"a"});
  test::write_text(index, original);
  SafetensorsCheckpoint ok(dir.path());
  EXPECT_EQ(ok.names().size(), 2u);
  // Without an index, a tensor in two files is an error.
  std::filesystem::remove(index);
  std::filesystem::copy_file(dir / "model-00001-of-00002.safetensors", dir / "copy.safetensors");
  try {
    SafetensorsCheckpoint c(dir.path());
    FAIL();
  } catch (const Error& e) {
    expect_error(e.what(), {"tensor 'a'", "appears in both"});
  }
  ScratchDir empty;
  EXPECT_THROW(SafetensorsCheckpoint c(empty.path()), Error);
}

}  // namespace
}  // namespace fp4moe
