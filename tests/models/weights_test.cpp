// Weights through key maps (models/weights): WeightSource over files, folders and shards with its
// errors; a toy architecture's key map (rename, row concat, half swap, identity, blocks, prefixes,
// zero-copy, strict errors); LoRA files in kohya and PEFT naming with fused layers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "engine/autograd/node.h"
#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"
#include "models/weights/weight_source.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/matmul.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using testing::dyadic;
using testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::same_bits;
using testing::scratch_dir;
using testing::TensorTree;

ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& e) {
    return e.kind();
  }
  return ErrorKind::Usage;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// ---- WeightSource ----

TEST(WeightSource, OneFileSortedNamesZeroCopy) {
  fs::path dir = scratch_dir("one_file");
  Tensor b = dyadic({3, 2}, 1), a = dyadic({4}, 2);
  save_safetensors((dir / "m.safetensors").string(), {{"b.weight", b}, {"a.bias", a}});
  for (const std::string& path : {(dir / "m.safetensors").string(), dir.string()}) {
    WeightSource source = WeightSource::open(path);
    EXPECT_EQ(source.names(), (std::vector<std::string>{"a.bias", "b.weight"}));
    EXPECT_EQ(source.files(), (std::vector<std::string>{(dir / "m.safetensors").string()}));
    EXPECT_EQ(source.info("b.weight").shape, (Shape{3, 2}));
    EXPECT_EQ(source.info("b.weight").dtype, "F32");
    Tensor got = source.get("b.weight");
    EXPECT_TRUE(same_bits(got, b));
    const SafetensorsFile& file = source.file_of("b.weight");
    auto* data = static_cast<const uint8_t*>(got.data());
    EXPECT_TRUE(data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes());
    EXPECT_THAT(error_of([&] { source.info("c"); }), HasSubstr("no tensor 'c'"));
  }
}

TEST(WeightSource, TensorOutlivesSource) {
  fs::path dir = scratch_dir("outlives");
  Tensor w = dyadic({5, 3}, 3);
  save_safetensors((dir / "m.safetensors").string(), {{"w", w}});
  Tensor held;
  {
    WeightSource source = WeightSource::open((dir / "m.safetensors").string());
    held = source.get("w");
  }
  EXPECT_TRUE(same_bits(held, w));  // the mapping lives while the tensor does
}

// A sharded folder: two shards and the index naming them, as diffusers writes it.
fs::path write_sharded(const std::string& name, const std::string& index_name = "diffusion_pytorch_model") {
  fs::path dir = scratch_dir(name);
  save_safetensors((dir / (index_name + "-00001-of-00002.safetensors")).string(),
                   {{"x.weight", dyadic({2, 2}, 4)}, {"y.weight", dyadic({3}, 5)}});
  save_safetensors((dir / (index_name + "-00002-of-00002.safetensors")).string(), {{"z.weight", dyadic({4}, 6)}});
  write_text(dir / (index_name + ".safetensors.index.json"),
             R"({"metadata": {"total_size": 40}, "weight_map": {"x.weight": ")" + index_name +
                 R"(-00001-of-00002.safetensors", "y.weight": ")" + index_name +
                 R"(-00001-of-00002.safetensors", "z.weight": ")" + index_name + R"(-00002-of-00002.safetensors"}})");
  return dir;
}

TEST(WeightSource, ShardedFolderIndexAndPipelineSubfolder) {
  fs::path dir = write_sharded("sharded/transformer");
  fs::path pipeline = dir.parent_path();
  write_text(pipeline / "model_index.json", "{}");
  for (auto [path, hint] : std::vector<std::pair<std::string, std::string>>{
           {dir.string(), ""},
           {(dir / "diffusion_pytorch_model.safetensors.index.json").string(), ""},
           {pipeline.string(), "transformer"}}) {
    WeightSource source = WeightSource::open(path, hint);
    EXPECT_EQ(source.names(), (std::vector<std::string>{"x.weight", "y.weight", "z.weight"}));
    EXPECT_EQ(source.files().size(), 2u);
    EXPECT_EQ(source.path(), (dir / "diffusion_pytorch_model.safetensors.index.json").string());
    EXPECT_TRUE(same_bits(source.get("z.weight"), dyadic({4}, 6)));
    EXPECT_THAT(source.file_of("z.weight").path(), HasSubstr("00002-of-00002"));
  }
  EXPECT_THAT(error_of([&] { WeightSource::open(pipeline.string()); }),
              HasSubstr("holds no .safetensors file and no *.safetensors.index.json"));
  EXPECT_THAT(error_of([&] { WeightSource::open(pipeline.string(), "unet"); }),
              HasSubstr("nor does a subfolder 'unet'"));
}

struct SourceErrorCase {
  const char* name;
  std::function<std::string()> make;  // writes the files, returns the path to open
  std::vector<std::string> says;      // what the message must name
};

TEST(WeightSource, ErrorsNameTheFile) {
  const std::vector<SourceErrorCase> cases = {
      {"missing path",
       [] { return (scratch_dir("err_missing") / "nope.safetensors").string(); },
       {"nope.safetensors", "does not exist"}},
      {"absent shard",
       [] {
         fs::path dir = write_sharded("err_absent_shard");
         fs::remove(dir / "diffusion_pytorch_model-00002-of-00002.safetensors");
         return dir.string();
       },
       {"diffusion_pytorch_model.safetensors.index.json", "names shard diffusion_pytorch_model-00002-of-00002",
        "z.weight", "does not exist"}},
      {"tensor not in its shard",
       [] {
         fs::path dir = write_sharded("err_not_in_shard");
         save_safetensors((dir / "diffusion_pytorch_model-00002-of-00002.safetensors").string(),
                          {{"other.weight", dyadic({4}, 6)}});
         return dir.string();
       },
       {"lists tensor 'z.weight'", "00002-of-00002.safetensors, which does not hold it"}},
      {"tensor in two shards",
       [] {
         fs::path dir = write_sharded("err_two_shards");
         save_safetensors((dir / "diffusion_pytorch_model-00002-of-00002.safetensors").string(),
                          {{"z.weight", dyadic({4}, 6)}, {"x.weight", dyadic({2, 2}, 4)}});
         return dir.string();
       },
       {"tensor 'x.weight' is in two shards", "00001-of-00002.safetensors (where index", "00002-of-00002.safetensors"}},
      {"tensor the index does not list",
       [] {
         fs::path dir = write_sharded("err_unlisted");
         save_safetensors((dir / "diffusion_pytorch_model-00002-of-00002.safetensors").string(),
                          {{"z.weight", dyadic({4}, 6)}, {"extra", dyadic({1}, 6)}});
         return dir.string();
       },
       {"holds tensor 'extra'", "does not list"}},
      {"index not JSON",
       [] {
         fs::path dir = write_sharded("err_bad_json");
         write_text(dir / "diffusion_pytorch_model.safetensors.index.json", "{\"weight_map\": ");
         return dir.string();
       },
       {"diffusion_pytorch_model.safetensors.index.json is not valid JSON"}},
      {"index without weight_map",
       [] {
         fs::path dir = write_sharded("err_no_map");
         write_text(dir / "diffusion_pytorch_model.safetensors.index.json", R"({"metadata": {}})");
         return dir.string();
       },
       {"diffusion_pytorch_model.safetensors.index.json has no \"weight_map\""}},
      {"two files, no index",
       [] {
         fs::path dir = scratch_dir("err_two_files");
         save_safetensors((dir / "a.safetensors").string(), {{"a", dyadic({1}, 1)}});
         save_safetensors((dir / "b.safetensors").string(), {{"b", dyadic({1}, 1)}});
         return dir.string();
       },
       {"2 .safetensors files (a.safetensors, b.safetensors)"}},
  };
  for (const SourceErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = c.make();
    const std::string message = error_of([&] { WeightSource::open(path); });
    for (const std::string& text : c.says) EXPECT_THAT(message, HasSubstr(text));
    EXPECT_EQ(kind_of([&] { WeightSource::open(path); }), ErrorKind::Data);
  }
}

// ---- key maps: a toy architecture whose model fuses q, k, v and keeps (shift, scale) order ----
//
// model ("native")                 other naming
//   embed.{weight,bias}            embedder.{weight,bias}
//   blocks.N.qkv.{weight,bias}     layers.N.{q,k,v}.{weight,bias}
//   blocks.N.norm.scale            layers.N.norm.weight
//   head.mod.weight                out_norm.weight, halves swapped
//   head.proj.weight               head.proj.weight (no rule)

const WeightFormat& native_format() {
  static const WeightFormat format{.name = "native",
                                   .detect_keys = {"blocks.0.qkv.weight"},
                                   .prefixes = {"", "model.diffusion_model."},
                                   .rules = {},
                                   .blocks = {}};
  return format;
}

const WeightFormat& other_format() {
  static const WeightFormat format{
      .name = "other",
      .detect_keys = {"layers.0.norm.weight"},
      .prefixes = {""},
      .rules = {rename_layer("embed", "embedder"), swap_halves("head.mod.weight", "out_norm.weight")},
      .blocks = {{.count_prefix = "layers.",
                  .rules = {concat_layer("blocks.{N}.qkv", {"layers.{N}.q", "layers.{N}.k", "layers.{N}.v"}),
                            rename("blocks.{N}.norm.scale", "layers.{N}.norm.weight")}}}};
  return format;
}

const int64_t kBlocks = 3;

std::map<std::string, Tensor> native_tensors() {
  std::map<std::string, Tensor> t;
  t["embed.weight"] = dyadic({4, 3}, 10);
  t["embed.bias"] = dyadic({4}, 11);
  for (int64_t n = 0; n < kBlocks; ++n) {
    const std::string b = "blocks." + std::to_string(n) + ".";
    t[b + "qkv.weight"] = dyadic({6, 4}, 20 + n);
    t[b + "qkv.bias"] = dyadic({6}, 30 + n);
    t[b + "norm.scale"] = dyadic({4}, 40 + n);
  }
  t["head.mod.weight"] = dyadic({4, 4}, 50);
  t["head.proj.weight"] = dyadic({2, 4}, 51);
  return t;
}

// The same tensors in the other naming, converted independently of the key map.
std::vector<std::pair<std::string, Tensor>> other_tensors(const std::map<std::string, Tensor>& native) {
  std::vector<std::pair<std::string, Tensor>> out = {{"embedder.weight", native.at("embed.weight")},
                                                     {"embedder.bias", native.at("embed.bias")},
                                                     {"head.proj.weight", native.at("head.proj.weight")}};
  const Tensor& mod = native.at("head.mod.weight");
  out.emplace_back("out_norm.weight", concat({mod.narrow(0, 2, 2), mod.narrow(0, 0, 2)}, 0));
  for (int64_t n = 0; n < kBlocks; ++n) {
    const std::string b = "blocks." + std::to_string(n) + ".", l = "layers." + std::to_string(n) + ".";
    for (const char* suffix : {"weight", "bias"}) {
      const Tensor& qkv = native.at(b + "qkv." + suffix);
      out.emplace_back(l + "q." + suffix, qkv.narrow(0, 0, 2));
      out.emplace_back(l + "k." + suffix, qkv.narrow(0, 2, 2));
      out.emplace_back(l + "v." + suffix, qkv.narrow(0, 4, 2));
    }
    out.emplace_back(l + "norm.weight", native.at(b + "norm.scale"));
  }
  return out;
}

std::map<std::string, Shape> shapes_of(const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, Shape> out;
  for (const auto& [name, t] : tensors) out[name] = t.shape();
  return out;
}

WeightSource write_source(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  fs::path dir = scratch_dir(name);
  save_safetensors((dir / "m.safetensors").string(), tensors);
  return WeightSource::open((dir / "m.safetensors").string());
}

TEST(WeightKeyMap, OtherNamingLoadsBitwiseThroughRules) {
  const auto native = native_tensors();
  WeightSource source = write_source("keymap_other", other_tensors(native));
  DetectedFormat format = detect_format(source, {native_format(), other_format()});
  EXPECT_EQ(format.format.name, "other");
  EXPECT_EQ(format.prefix, "");
  EXPECT_EQ(mapped_shapes(source, format), shapes_of(native));

  auto model = TensorTree::with_shapes(shapes_of(native), DType::F32);
  LoadMappedReport report = load_mapped(*model, source, format);
  EXPECT_EQ(report.n_loaded, static_cast<int64_t>(native.size()));
  // Renames of equal dtype view the mapping (embed.*, norm scales, head.proj); concat and swap copy.
  EXPECT_EQ(report.n_zero_copy, 3 + kBlocks);
  EXPECT_EQ(report.n_materialized, 1 + 2 * kBlocks);
  const SafetensorsFile& file = source.file_of("embedder.weight");
  for (const auto& [name, tensor] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(tensor, native.at(name)));
    EXPECT_FALSE(autograd::requires_grad(tensor));
    auto* data = static_cast<const uint8_t*>(tensor.data());
    const bool in_mapping = data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes();
    const bool rename = name.find("qkv") == std::string::npos && name != "head.mod.weight";
    EXPECT_EQ(in_mapping, rename);
  }
}

TEST(WeightKeyMap, NativeNamesWithPrefixAndCastToSlotDtype) {
  const auto native = native_tensors();
  std::vector<std::pair<std::string, Tensor>> prefixed;
  for (const auto& [name, t] : native) prefixed.emplace_back("model.diffusion_model." + name, t.to(DType::BF16));
  prefixed.emplace_back("vae.decoder.weight", dyadic({2}, 1));  // outside the prefix: not looked at
  WeightSource source = write_source("keymap_prefix", prefixed);
  DetectedFormat format = detect_format(source, {native_format(), other_format()});
  EXPECT_EQ(format.format.name, "native");
  EXPECT_EQ(format.prefix, "model.diffusion_model.");
  EXPECT_EQ(mapped_shapes(source, format), shapes_of(native));

  auto model = TensorTree::with_shapes(shapes_of(native), DType::F32);
  LoadMappedReport report = load_mapped(*model, source, format, {.trainable = true});
  EXPECT_EQ(report.n_zero_copy, 0);  // BF16 file, F32 slots: cast once
  EXPECT_EQ(report.n_materialized, static_cast<int64_t>(native.size()));
  EXPECT_EQ(report.n_outside_prefix, 1);
  for (const auto& [name, tensor] : model->named_parameters()) {
    EXPECT_TRUE(same_bits(tensor, native.at(name))) << name;  // dyadic values are exact in bf16
    EXPECT_EQ(tensor.dtype(), DType::F32);
    EXPECT_TRUE(autograd::requires_grad(tensor));
  }
}

TEST(WeightKeyMap, DetectionFailureListsFormatsAndKeys) {
  WeightSource source = write_source("keymap_unknown", {{"foo.weight", dyadic({2}, 1)}});
  const std::string message = error_of([&] { detect_format(source, {native_format(), other_format()}); });
  for (const char* text : {"is in none of the known formats", "'native' looks for 'blocks.0.qkv.weight'",
                           "'model.diffusion_model.'", "'other' looks for 'layers.0.norm.weight'", "foo.weight"})
    EXPECT_THAT(message, HasSubstr(text));
  EXPECT_EQ(kind_of([&] { detect_format(source, {native_format()}); }), ErrorKind::Data);
}

TEST(WeightKeyMap, CountBlocksAndExpandRules) {
  EXPECT_EQ(count_blocks({"layers.0.a", "layers.11.b", "layers.x.c", "layers.3", "other.20.a"}, "layers."), 12);
  EXPECT_EQ(count_blocks({"a.b"}, "layers."), 0);
  const auto native = native_tensors();
  WeightSource source = write_source("keymap_expand", other_tensors(native));
  std::vector<KeyRule> rules = expand_rules(source, {.format = other_format(), .prefix = ""});
  // embed weight+bias, head.mod, then per block: qkv weight+bias and the norm scale.
  ASSERT_EQ(rules.size(), 3u + 3u * kBlocks);
  EXPECT_EQ(rules[3].target, "blocks.0.qkv.weight");
  EXPECT_EQ(rules[3].sources,
            (std::vector<std::string>{"layers.0.q.weight", "layers.0.k.weight", "layers.0.v.weight"}));
  EXPECT_EQ(rules.back().target, "blocks.2.norm.scale");
}

TEST(WeightKeyMap, StrictErrorNamesEverythingAndChangesNothing) {
  const auto native = native_tensors();
  auto source_tensors = other_tensors(native);
  // Remove block 2's v (its qkv is then incomplete), add a stray tensor, and give the model a
  // parameter the source lacks and a different embed width.
  std::erase_if(source_tensors, [](const auto& e) { return e.first == "layers.2.v.weight"; });
  source_tensors.emplace_back("stray.weight", dyadic({2}, 9));
  WeightSource source = write_source("keymap_strict", source_tensors);
  DetectedFormat format = detect_format(source, {native_format(), other_format()});
  auto shapes = shapes_of(native);
  shapes["extra.weight"] = {5};
  shapes["embed.weight"] = {4, 5};
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  Tensor before = model->parameter("embed.bias");

  const std::string message = error_of([&] { load_mapped(*model, source, format); });
  for (const char* text :
       {"read as format 'other'", "2 parameters missing", "1 source tensors unused", "1 shape mismatches",
        "extra.weight", "blocks.2.qkv.weight (needs layers.2.v.weight, which the source lacks)", "stray.weight",
        "embed.weight: the model expects [4, 5], the source has [4, 3] (embedder.weight [4, 3])"})
    EXPECT_THAT(message, HasSubstr(text));
  EXPECT_EQ(kind_of([&] { load_mapped(*model, source, format); }), ErrorKind::Data);
  EXPECT_TRUE(model->parameter("embed.bias").same(before));  // checked before any slot changes

  EXPECT_THAT(error_of([&] { mapped_shapes(source, format); }),
              HasSubstr("blocks.2.qkv.weight: needs layers.2.v.weight, which the source lacks"));
}

TEST(WeightKeyMap, RulesThatCannotCombineAreShapeErrors) {
  auto native = native_tensors();
  auto source_tensors = other_tensors(native);
  for (auto& [name, t] : source_tensors) {
    if (name == "layers.1.k.weight") t = dyadic({2, 5}, 1);  // another width than q and v
    if (name == "out_norm.weight") t = dyadic({3, 4}, 1);    // odd rows: no halves
  }
  WeightSource source = write_source("keymap_combine", source_tensors);
  DetectedFormat format = detect_format(source, {other_format()});
  auto model = TensorTree::with_shapes(shapes_of(native), DType::F32);
  const std::string message = error_of([&] { load_mapped(*model, source, format); });
  EXPECT_THAT(message, HasSubstr("2 shape mismatches"));
  EXPECT_THAT(message, HasSubstr("blocks.1.qkv.weight: cannot concatenate the rows of layers.1.q.weight [2, 4] + "
                                 "layers.1.k.weight [2, 5] + layers.1.v.weight [2, 4]"));
  EXPECT_THAT(message, HasSubstr("head.mod.weight: rows of out_norm.weight [3, 4] do not split into two halves"));
}

TEST(WeightKeyMap, FirstOfTakesTheFirstNamePresentAndAcceptsTiedCopies) {
  // T5's embedding: "shared.weight", or "encoder.embed_tokens.weight", or both (a tied copy).
  const WeightFormat tied{.name = "tied",
                          .detect_keys = {"head.proj.weight"},
                          .prefixes = {""},
                          .rules = {first_of("embed.weight", {"shared.weight", "encoder.embed.weight"})},
                          .blocks = {}};
  const Tensor table = dyadic({4, 3}, 7), other = dyadic({4, 3}, 9), proj = dyadic({2, 4}, 8);
  const std::map<std::string, Shape> shapes = {{"embed.weight", {4, 3}}, {"head.proj.weight", {2, 4}}};
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, Tensor>> tensors;
  };
  const std::vector<Case> cases = {
      {"first", {{"shared.weight", table}, {"head.proj.weight", proj}}},
      {"second", {{"encoder.embed.weight", table}, {"head.proj.weight", proj}}},
      // Both: the first name is loaded; the copy is accepted unread (its values are not compared).
      {"both", {{"shared.weight", table}, {"encoder.embed.weight", other}, {"head.proj.weight", proj}}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WeightSource source = write_source(std::string("keymap_first_of_") + c.name, c.tensors);
    DetectedFormat format = detect_format(source, {tied});
    EXPECT_EQ(mapped_shapes(source, format), shapes);
    auto model = TensorTree::with_shapes(shapes, DType::F32);
    LoadMappedReport report = load_mapped(*model, source, format);
    EXPECT_EQ(report.n_loaded, 2);
    EXPECT_EQ(report.n_zero_copy, 2);
    EXPECT_TRUE(same_bits(model->parameter("embed.weight"), table));
  }
  WeightSource bad = write_source("keymap_first_of_bad", {{"shared.weight", table},
                                                          {"encoder.embed.weight", dyadic({5, 3}, 9)},
                                                          {"head.proj.weight", proj}});
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  EXPECT_THAT(error_of([&] { load_mapped(*model, bad, detect_format(bad, {tied})); }),
              HasSubstr("embed.weight: shared.weight [4, 3] and its tied copy encoder.embed.weight [5, 3] differ in "
                        "shape"));
}

// ---- key maps: fused rows split apart, a transposed projection, ignored buffers ----
//
// model                         fused naming (OpenCLIP-like)
//   blocks.N.{q,k,v}.weight     layers.N.in_proj_weight [6, 4], rows [q; k; v]
//   blocks.N.{q,k,v}.bias       layers.N.in_proj_bias [6]
//   head.weight [3, 4]          proj [4, 3] (used as x @ proj)
//   -                           position_ids, logit_scale (ignored)

const WeightFormat& fused_format() {
  static const WeightFormat format = [] {
    WeightFormat f{.name = "fused",
                   .detect_keys = {"layers.0.in_proj_weight"},
                   .prefixes = {""},
                   .rules = {transposed("head.weight", "proj")},
                   .blocks = {},
                   .ignored = {"position_ids", "logit_scale"}};
    BlockRules blocks{.count_prefix = "layers.", .rules = {}};
    const char* parts[] = {"q", "k", "v"};
    for (int64_t part = 0; part < 3; ++part) {
      blocks.rules.push_back(
          split_rows(std::string("blocks.{N}.") + parts[part] + ".weight", "layers.{N}.in_proj_weight", part, 3));
      blocks.rules.push_back(
          split_rows(std::string("blocks.{N}.") + parts[part] + ".bias", "layers.{N}.in_proj_bias", part, 3));
    }
    f.blocks = {blocks};
    return f;
  }();
  return format;
}

std::map<std::string, Tensor> unfused_tensors() {
  std::map<std::string, Tensor> t;
  for (int64_t n = 0; n < kBlocks; ++n)
    for (const char* part : {"q", "k", "v"}) {
      const std::string b = "blocks." + std::to_string(n) + "." + part;
      t[b + ".weight"] = dyadic({2, 4}, 60 + 2 * n + part[0]);
      t[b + ".bias"] = dyadic({2}, 70 + 2 * n + part[0]);
    }
  t["head.weight"] = dyadic({3, 4}, 80);
  return t;
}

std::vector<std::pair<std::string, Tensor>> fused_tensors(const std::map<std::string, Tensor>& model) {
  std::vector<std::pair<std::string, Tensor>> out = {{"proj", model.at("head.weight").transpose(0, 1).contiguous()},
                                                     {"position_ids", Tensor::from_vector<int64_t>({0, 1, 2}, {1, 3})},
                                                     {"logit_scale", Tensor::scalar(4.6)}};
  for (int64_t n = 0; n < kBlocks; ++n) {
    const std::string b = "blocks." + std::to_string(n) + ".", l = "layers." + std::to_string(n) + ".";
    for (const char* suffix : {"weight", "bias"}) {
      const std::string s = std::string(".") + suffix;
      out.emplace_back(l + "in_proj_" + suffix,
                       concat({model.at(b + "q" + s), model.at(b + "k" + s), model.at(b + "v" + s)}, 0));
    }
  }
  return out;
}

TEST(WeightKeyMap, SplitRowsTransposeAndIgnoredNames) {
  const auto model_tensors = unfused_tensors();
  WeightSource source = write_source("keymap_fused", fused_tensors(model_tensors));
  DetectedFormat format = detect_format(source, {native_format(), fused_format()});
  EXPECT_EQ(format.format.name, "fused");
  EXPECT_EQ(mapped_shapes(source, format), shapes_of(model_tensors));  // ignored names are not targets

  auto model = TensorTree::with_shapes(shapes_of(model_tensors), DType::F32);
  LoadMappedReport report = load_mapped(*model, source, format);
  EXPECT_EQ(report.n_loaded, static_cast<int64_t>(model_tensors.size()));
  EXPECT_EQ(report.n_zero_copy, 6 * kBlocks);  // row blocks of the same dtype view the file
  EXPECT_EQ(report.n_materialized, 1);         // the transpose
  EXPECT_EQ(report.n_ignored, 2);
  const SafetensorsFile& file = source.file_of("proj");
  for (const auto& [name, tensor] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(tensor, model_tensors.at(name)));
    auto* data = static_cast<const uint8_t*>(tensor.data());
    EXPECT_EQ(data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes(), name != "head.weight");
  }

  // Another dtype: every split is cast once.
  std::vector<std::pair<std::string, Tensor>> bf16 = fused_tensors(model_tensors);
  for (auto& [name, t] : bf16)
    if (t.dtype() == DType::F32) t = t.to(DType::BF16);
  WeightSource bf16_source = write_source("keymap_fused_bf16", bf16);
  auto cast_model = TensorTree::with_shapes(shapes_of(model_tensors), DType::F32);
  report = load_mapped(*cast_model, bf16_source, detect_format(bf16_source, {fused_format()}));
  EXPECT_EQ(report.n_materialized, 6 * kBlocks + 1);
  for (const auto& [name, tensor] : cast_model->named_parameters())
    EXPECT_TRUE(same_bits(tensor, model_tensors.at(name))) << name;  // dyadic values are exact in bf16

  // Rows that do not split, a projection that is not 2-d, a block of the wrong height.
  auto broken = fused_tensors(model_tensors);
  for (auto& [name, t] : broken) {
    if (name == "layers.1.in_proj_weight") t = dyadic({7, 4}, 1);
    if (name == "proj") t = dyadic({4, 3, 1}, 2);
  }
  WeightSource broken_source = write_source("keymap_fused_broken", broken);
  auto shapes = shapes_of(model_tensors);
  shapes["blocks.2.k.bias"] = {3};
  auto broken_model = TensorTree::with_shapes(shapes, DType::F32);
  const DetectedFormat broken_format = detect_format(broken_source, {fused_format()});
  const std::string message = error_of([&] { load_mapped(*broken_model, broken_source, broken_format); });
  for (const char* text :
       {"5 shape mismatches",
        "blocks.1.k.weight: rows of layers.1.in_proj_weight [7, 4] do not split into 3 equal blocks",
        "head.weight: proj [4, 3, 1] is not 2-d and cannot be transposed",
        "blocks.2.k.bias: the model expects [3], the source has [2] (layers.2.in_proj_bias [6], row block 2 of 3)"})
    EXPECT_THAT(message, HasSubstr(text));
  EXPECT_THAT(error_of([&] { mapped_shapes(broken_source, broken_format); }),
              HasSubstr("blocks.1.v.weight: rows of layers.1.in_proj_weight [7, 4] do not split into 3 equal blocks"));
}

// ---- key maps: a change of rank by unit axes (diffusers' Linear attention vs LDM's 1x1 convs) ----

TEST(WeightKeyMap, ReshapeAddsOrDropsTrailingUnitAxes) {
  const WeightFormat format{.name = "linear_attention",
                            .detect_keys = {"attn.to_q.weight"},
                            .prefixes = {""},
                            .rules = {reshaped("attn.q.weight", "attn.to_q.weight", 4),
                                      rename("attn.q.bias", "attn.to_q.bias"),
                                      reshaped("head.weight", "head_conv.weight", 2)},
                            .blocks = {},
                            .ignored = {}};
  const Tensor q = dyadic({3, 4}, 1), bias = dyadic({3}, 2), head = dyadic({2, 3, 1, 1}, 3);
  WeightSource source =
      write_source("keymap_reshape", {{"attn.to_q.weight", q}, {"attn.to_q.bias", bias}, {"head_conv.weight", head}});
  DetectedFormat detected = detect_format(source, {format});
  const std::map<std::string, Shape> shapes = {
      {"attn.q.weight", {3, 4, 1, 1}}, {"attn.q.bias", {3}}, {"head.weight", {2, 3}}};
  EXPECT_EQ(mapped_shapes(source, detected), shapes);
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  LoadMappedReport report = load_mapped(*model, source, detected);
  EXPECT_EQ(report.n_zero_copy, 3);  // a reshape of a contiguous tensor is a view of the file
  EXPECT_EQ(model->parameter("attn.q.weight").to_vector<float>(), q.to_vector<float>());
  EXPECT_EQ(model->parameter("head.weight").to_vector<float>(), head.to_vector<float>());
  // Into another dtype: cast once.
  auto bf16 = TensorTree::with_shapes(shapes, DType::BF16);
  EXPECT_EQ(load_mapped(*bf16, source, detected).n_materialized, 3);
  EXPECT_EQ(bf16->parameter("attn.q.weight").to(DType::F32).to_vector<float>(), q.to_vector<float>());
  // An axis of extent > 1 cannot be dropped.
  WeightSource wide = write_source("keymap_reshape_wide", {{"attn.to_q.weight", q},
                                                           {"attn.to_q.bias", bias},
                                                           {"head_conv.weight", dyadic({2, 3, 3, 3}, 4)}});
  EXPECT_THAT(error_of([&] { mapped_shapes(wide, detect_format(wide, {format})); }),
              HasSubstr("head.weight: head_conv.weight [2, 3, 3, 3] cannot become 2 axes"));
}

// ---- LoRA formats ----

// A two-module layout: "attn.qkv" (rows 2, 2, 4 as q, k, v) and "head.mod" (halves swapped).
LoraLayout toy_layout() {
  LoraLayout layout;
  layout.modules.push_back({.module = "attn.qkv",
                            .parts = {{.peft_module = "attn.to_q", .row_begin = 0, .row_end = 2},
                                      {.peft_module = "attn.to_k", .row_begin = 2, .row_end = 4},
                                      {.peft_module = "attn.to_v", .row_begin = 4, .row_end = 8}}});
  layout.modules.push_back({.module = "head.mod", .parts = {{.peft_module = "norm_out.linear", .swap_halves = true}}});
  layout.modules.push_back({.module = "head.proj", .parts = {{.peft_module = "proj_out"}}});
  return layout;
}

Tensor delta(const LoraTensors& lora) {
  return mul(matmul(lora.up.to(DType::F32), lora.down.to(DType::F32)), lora.scale());
}

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(out.count(name), 0u) << name;
    out[name] = t;
  }
  return out;
}

LoraSet toy_set() {
  return {{"attn.qkv", {.down = dyadic({3, 5}, 1), .up = dyadic({8, 3}, 2), .alpha = 6.0}},
          {"head.mod", {.down = dyadic({2, 5}, 3), .up = dyadic({6, 2}, 4), .alpha = 1.0}}};
}

TEST(LoraFormat, KohyaNamesRoundTrip) {
  LoraSet set = toy_set();
  set["attn.qkv"].dora_scale = dyadic({1, 5}, 5);
  auto tensors = as_map(to_kohya(set));
  EXPECT_EQ(tensors.size(), 7u);
  EXPECT_TRUE(tensors.count("lora_unet_attn_qkv.lora_down.weight"));
  EXPECT_TRUE(tensors.count("lora_unet_head_mod.lora_up.weight"));
  EXPECT_EQ(tensors.at("lora_unet_attn_qkv.alpha").item(), 6.0);
  EXPECT_TRUE(tensors.count("lora_unet_attn_qkv.dora_scale"));
  LoraSet back = from_kohya(tensors, toy_layout().module_paths());
  ASSERT_EQ(back.size(), 2u);
  for (const auto& [module, lora] : set) {
    EXPECT_TRUE(same_bits(back[module].down, lora.down));
    EXPECT_TRUE(same_bits(back[module].up, lora.up));
    EXPECT_EQ(back[module].alpha, lora.alpha);
  }
  EXPECT_TRUE(same_bits(back["attn.qkv"].dora_scale, set["attn.qkv"].dora_scale));

  tensors.erase("lora_unet_head_mod.alpha");  // no alpha: alpha = rank
  tensors["lora_te1_text_model_q.lora_down.weight"] = dyadic({2, 2}, 1);
  EXPECT_THAT(error_of([&] { from_kohya(tensors, toy_layout().module_paths()); }),
              HasSubstr("1 tensors belong to no module of the model: lora_te1_text_model_q.lora_down.weight"));
  std::vector<std::string> unused;
  back = from_kohya(tensors, toy_layout().module_paths(), &unused);
  EXPECT_EQ(unused, (std::vector<std::string>{"lora_te1_text_model_q.lora_down.weight"}));
  EXPECT_EQ(back["head.mod"].alpha, 2.0);
}

TEST(LoraFormat, PeftSplitBakesScaleIntoBAndRegroupsToRankR) {
  LoraSet set = toy_set();
  auto peft = as_map(to_peft(set, toy_layout()));
  EXPECT_EQ(peft.size(), 8u);
  const LoraTensors& qkv = set["attn.qkv"];
  for (const char* part : {"to_q", "to_k", "to_v"})
    EXPECT_TRUE(same_bits(peft.at(std::string("transformer.attn.") + part + ".lora_A.weight"), qkv.down));
  // lora_B = scale · up rows (scale 6 / 3 = 2).
  EXPECT_TRUE(same_bits(peft.at("transformer.attn.to_v.lora_B.weight"), mul(qkv.up.narrow(0, 4, 4), 2.0)));
  // The swapped module (scale 1 / 2): rows [3, 6) first.
  const Tensor& mod_up = set["head.mod"].up;
  EXPECT_TRUE(same_bits(peft.at("transformer.norm_out.linear.lora_B.weight"),
                        mul(concat({mod_up.narrow(0, 3, 3), mod_up.narrow(0, 0, 3)}, 0), 0.5)));

  LoraSet back = from_peft(peft, toy_layout());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back["attn.qkv"].rank(), 3);  // the parts share lora_A
  EXPECT_EQ(back["attn.qkv"].alpha, 3.0);
  for (const auto& [module, lora] : set) EXPECT_TRUE(same_bits(delta(back[module]), delta(lora))) << module;
}

TEST(LoraFormat, DifferingLoraAGiveABlockDiagonalAdapterWithTheSameDelta) {
  // Parts with their own A, rank and scale (as trained with split_qkv or by PEFT per layer).
  std::map<std::string, Tensor> peft = {
      {"transformer.attn.to_q.lora_A.weight", dyadic({2, 5}, 11)},
      {"transformer.attn.to_q.lora_B.weight", dyadic({2, 2}, 12)},
      {"transformer.attn.to_k.lora_A.weight", dyadic({1, 5}, 13)},
      {"transformer.attn.to_k.lora_B.weight", dyadic({2, 1}, 14)},
      {"transformer.attn.to_v.lora_A.weight", dyadic({3, 5}, 15)},
      {"transformer.attn.to_v.lora_B.weight", dyadic({4, 3}, 16)},
      {"transformer.attn.to_k.alpha", Tensor::scalar(4.0)}};  // to_k's own scale 4 / 1
  auto scale = [](const std::string& module, int64_t rank) { return 0.5; };
  LoraSet set = from_peft(peft, toy_layout(), scale);
  const LoraTensors& qkv = set.at("attn.qkv");
  EXPECT_EQ(qkv.rank(), 6);
  EXPECT_EQ(qkv.scale(), 1.0);
  // Each part's scale · B @ A in its rows; dyadic values keep every sum exact, so bitwise.
  auto part = [&](const char* name, double s) {
    return mul(matmul(peft.at(std::string("transformer.attn.") + name + ".lora_B.weight"),
                      peft.at(std::string("transformer.attn.") + name + ".lora_A.weight")),
               s);
  };
  EXPECT_TRUE(same_bits(delta(qkv), concat({part("to_q", 0.5), part("to_k", 4.0), part("to_v", 0.5)}, 0)));
  // Off-diagonal blocks of up are zero.
  EXPECT_EQ(qkv.up.narrow(0, 0, 2).narrow(1, 2, 4).to_vector<float>(), std::vector<float>(8, 0.0f));
}

TEST(LoraFormat, MissingPartsAreZeroRowsAndUnknownKeysAreNamed) {
  std::map<std::string, Tensor> peft = {{"transformer.attn.to_k.lora_A.weight", dyadic({2, 5}, 1)},
                                        {"transformer.attn.to_k.lora_B.weight", dyadic({2, 2}, 2)}};
  LoraSet set = from_peft(peft, toy_layout());
  Tensor d = delta(set.at("attn.qkv"));
  EXPECT_EQ(d.shape(), (Shape{8, 5}));
  EXPECT_TRUE(same_bits(d.narrow(0, 2, 2).contiguous(), matmul(peft.at("transformer.attn.to_k.lora_B.weight"),
                                                               peft.at("transformer.attn.to_k.lora_A.weight"))));
  EXPECT_EQ(d.narrow(0, 4, 4).contiguous().to_vector<float>(), std::vector<float>(20, 0.0f));

  peft["transformer.attn.to_out.0.lora_A.weight"] = dyadic({2, 5}, 3);
  peft["text_encoder.q.lora_A.weight"] = dyadic({2, 5}, 3);
  const std::string message = error_of([&] { from_peft(peft, toy_layout()); });
  EXPECT_THAT(message, HasSubstr("2 tensors belong to no module"));
  EXPECT_THAT(message, HasSubstr("transformer.attn.to_out.0.lora_A.weight"));
  std::vector<std::string> unused;
  from_peft(peft, toy_layout(), {}, &unused);
  EXPECT_EQ(unused.size(), 2u);

  peft = {{"transformer.attn.to_k.lora_A.weight", dyadic({2, 5}, 1)},
          {"transformer.attn.to_k.lora_B.weight", dyadic({3, 2}, 2)}};
  EXPECT_THAT(error_of([&] { from_peft(peft, toy_layout()); }),
              HasSubstr("transformer.attn.to_k.lora_B.weight has 3 rows; module 'attn.qkv' takes 2 rows [2, 4)"));
}

TEST(LoraFormat, OutputAxisDoraMagnitudeSplitsByRows) {
  LoraSet set = toy_set();
  set["attn.qkv"].dora_scale = dyadic({8}, 7);
  set["head.mod"].dora_scale = dyadic({6}, 8);
  auto peft = as_map(to_peft(set, toy_layout()));
  EXPECT_TRUE(
      same_bits(peft.at("transformer.attn.to_k.lora_magnitude_vector"), set["attn.qkv"].dora_scale.narrow(0, 2, 2)));
  const Tensor& m = set["head.mod"].dora_scale;
  EXPECT_TRUE(same_bits(peft.at("transformer.norm_out.linear.lora_magnitude_vector"),
                        concat({m.narrow(0, 3, 3), m.narrow(0, 0, 3)}, 0)));
  LoraSet back = from_peft(peft, toy_layout());
  EXPECT_TRUE(same_bits(back["attn.qkv"].dora_scale, set["attn.qkv"].dora_scale));
  EXPECT_TRUE(same_bits(back["head.mod"].dora_scale, m));

  peft.erase("transformer.attn.to_v.lora_magnitude_vector");
  EXPECT_THAT(error_of([&] { from_peft(peft, toy_layout()); }),
              HasSubstr("'attn.qkv' has a lora_magnitude_vector for 2 of its 3 parts"));
  set["attn.qkv"].dora_scale = dyadic({1, 5}, 7);  // input-axis (kohya) DoRA
  EXPECT_THAT(error_of([&] { to_peft(set, toy_layout()); }), HasSubstr("can only be saved kohya style"));
  LoraSet unknown = {{"blocks.9.mlp", {.down = dyadic({1, 2}, 1), .up = dyadic({2, 1}, 1), .alpha = 1}}};
  EXPECT_THAT(error_of([&] { to_peft(unknown, toy_layout()); }),
              HasSubstr("'blocks.9.mlp' has no diffusers/PEFT name"));
}

TEST(LoraFormat, PeftScalesFromDiffusersMetadata) {
  EXPECT_FALSE(peft_scales({}));
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"lora_adapter_metadata", R"({"transformer.r": 4, "transformer.lora_alpha": 8,
        "transformer.alpha_pattern": {"attn.to_k": 2}, "transformer.use_rslora": false})"}};
  PeftScale scale = peft_scales(metadata);
  ASSERT_TRUE(scale);
  EXPECT_EQ(scale("transformer_blocks.0.attn.to_q", 4), 2.0);
  EXPECT_EQ(scale("transformer_blocks.0.attn.to_k", 4), 0.5);
  EXPECT_EQ(scale("transformer_blocks.0.attn.add_k_proj", 4), 2.0);  // matches whole dotted components only
  PeftScale rslora =
      peft_scales({{"lora_adapter_metadata", R"({"transformer.lora_alpha": 8, "transformer.use_rslora": true})"}});
  EXPECT_EQ(rslora("x", 4), 4.0);
  EXPECT_THAT(error_of([] { peft_scales({{"lora_adapter_metadata", "{"}}); }), HasSubstr("not valid JSON"));
}

TEST(LoraFormat, ReadFileDetectsTheNaming) {
  fs::path dir = scratch_dir("lora_files");
  save_safetensors((dir / "k.safetensors").string(), to_kohya(toy_set()));
  save_safetensors((dir / "p.safetensors").string(), to_peft(toy_set(), toy_layout()), {{"format", "pt"}});
  save_safetensors((dir / "x.safetensors").string(), {{"w", dyadic({1}, 1)}});
  EXPECT_EQ(read_lora_file((dir / "k.safetensors").string()).format, LoraFileFormat::Kohya);
  LoraFile peft = read_lora_file((dir / "p.safetensors").string());
  EXPECT_EQ(peft.format, LoraFileFormat::Peft);
  EXPECT_EQ(peft.metadata.at("format"), "pt");
  EXPECT_THAT(error_of([&] { read_lora_file((dir / "x.safetensors").string()); }), HasSubstr("not a LoRA file?"));
}

}  // namespace
}  // namespace wick
