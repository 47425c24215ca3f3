// models/model_factory and models/lora_files: the DiT from a config and a dataset through the
// registry, base weights, target presets, and the kohya-style LoRA/DoRA files (keys, shapes,
// metadata, round trip, mismatches).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/config/train_config.h"
#include "engine/module.h"
#include "models/dit/dit_architecture.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/weights/lora_format.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/train/synthetic_dataset.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

namespace wick {
namespace {

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_train_model_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

const DataGeometry kGeometry{.latent_channels = 4, .latent_sizes = {{8, 8}}, .text_length = 8, .text_dim = 16,
                             .pooled_dim = 16};

// The DiT a build returned.
DiT& dit(const std::shared_ptr<DiffusionModel>& model) {
  auto* d = dynamic_cast<DiT*>(model.get());
  EXPECT_NE(d, nullptr);
  return *d;
}

// The tiny DiT (hidden 32, depth 2) with --set style overrides.
TrainConfig tiny_config(const std::vector<std::string>& sets = {}) {
  return parse_config_string("name: t\nmodel: {hidden_size: 32, depth: 2, num_heads: 2}\ndataset: {path: unused.h5}\n",
                             "<test>", config_schema(), sets);
}

// A full model saved as base weights, and a LoRA config on it.
std::string save_base(const fs::path& dir) {
  auto base = build_model(tiny_config(), kGeometry, Device::cpu());
  std::string path = (dir / "base.safetensors").string();
  save_parameters(*base, path);
  return path;
}

TrainConfig lora_config(const std::string& base, const std::string& type, int64_t rank,
                        std::vector<std::string> sets = {}) {
  sets.insert(sets.end(), {"model.name_or_path=" + base, "network.type=" + type,
                           "network.linear=" + std::to_string(rank), "save.dtype=f32"});
  return tiny_config(sets);
}

void randomize_adapters(Module& model, uint64_t seed) {
  for (auto& [path, adapter] : nn::find_adapters(model)) {
    Tensor& up = adapter->up_weight();
    autograd::detach(up).copy_from(randn(up.shape(), derive_stream(seed++, 0, 0, RngPurpose::Test)));
  }
}

TEST(TrainModel, GradientCheckpointingKeyReachesTheModel) {
  EXPECT_FALSE(dit(build_model(tiny_config(), kGeometry, Device::cpu())).config().gradient_checkpointing);
  EXPECT_TRUE(dit(build_model(tiny_config({"train.gradient_checkpointing=true"}), kGeometry, Device::cpu()))
                  .config()
                  .gradient_checkpointing);
}

TEST(TrainModel, BuildsTheDiTFromTheDatasetGeometry) {
  fs::path dir = temp_dir("geometry");
  testing::write_synthetic_dataset((dir / "d.h5").string(), {.n_samples = 6});
  auto ds = LatentDataset::open((dir / "d.h5").string());
  DataGeometry g = dataset_geometry(*ds);
  EXPECT_EQ(g.latent_channels, 4);
  EXPECT_EQ(g.latent_sizes, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_EQ(g.text_dim, 16);
  EXPECT_EQ(g.pooled_dim, 16);
  auto model = build_model(tiny_config(), g, Device::cpu());
  EXPECT_EQ(dit(model).config().in_channels, 4);
  EXPECT_EQ(dit(model).config().input_size, 8);
  EXPECT_EQ(model->n_parameters(true), model->n_parameters());  // network full: everything trains

  // The geometry is read back from a saved model, so a checkpoint alone rebuilds it.
  std::string base = save_base(dir);
  DataGeometry back = dit_weights_geometry(base, 2);
  EXPECT_EQ(back.latent_channels, 4);
  EXPECT_EQ(back.latent_sizes, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_EQ(back.text_dim, 16);
  EXPECT_EQ(back.pooled_dim, 16);
  auto from_weights = build_model(lora_config(base, "lora", 4), DataGeometry{.latent_channels = 4}, Device::cpu());
  EXPECT_EQ(dit(from_weights).config().input_size, 8);

  // Buckets the DiT cannot take are refused before anything is built.
  DataGeometry two_sizes = g;
  two_sizes.latent_sizes.push_back({6, 6});
  EXPECT_THAT(error_of([&] { build_model(tiny_config(), two_sizes, Device::cpu()); }),
              HasSubstr("the DiT takes latents of one size"));
}

TEST(TrainModel, ConfigThatContradictsTheDataOrTheBaseIsAConfigError) {
  fs::path dir = temp_dir("mismatch");
  std::string base = save_base(dir);
  EXPECT_THAT(error_of([&] { build_model(tiny_config({"model.in_channels=3"}), kGeometry, Device::cpu()); }),
              HasSubstr("model.in_channels is 3 but the latents have 4 channels"));
  EXPECT_THAT(error_of([&] { build_model(tiny_config({"model.text_dim=32"}), kGeometry, Device::cpu()); }),
              HasSubstr("model.text_dim is 32"));
  TrainConfig wider = tiny_config({"model.hidden_size=64", "model.name_or_path=" + base});
  try {
    build_model(wider, kGeometry, Device::cpu());
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("tensor 'pos_embed' has shape [1, 16, 32] but the configured model expects [1, 16, 64]"));
  }
  TrainConfig deeper = tiny_config({"model.depth=3", "model.name_or_path=" + base});
  EXPECT_THAT(error_of([&] { build_model(deeper, kGeometry, Device::cpu()); }), HasSubstr("not in the file"));
  TrainConfig missing = tiny_config({"model.name_or_path=" + (dir / "nope.safetensors").string()});
  EXPECT_THAT(error_of([&] { build_model(missing, kGeometry, Device::cpu()); }), HasSubstr("does not exist"));
}

TEST(TrainModel, TargetPresetsExpandAndUnknownWordsAreRefused) {
  fs::path dir = temp_dir("presets");
  std::string base = save_base(dir);
  auto count = [&](const std::string& target) {
    return nn::find_adapters(*build_model(lora_config(base, "lora", 4, {"network.target=" + target}), kGeometry,
                                          Device::cpu()))
        .size();
  };
  EXPECT_EQ(count("[attention]"), 6u);      // q, kv, proj of 2 blocks
  EXPECT_EQ(count("[attention_mlp]"), 10u);  // + fc1, fc2
  EXPECT_EQ(count("[all]"), 12u);            // + the modulation Linear
  EXPECT_EQ(count("[attention, 'blocks.0.mlp.fc1']"), 7u);
  EXPECT_THAT(error_of([&] { count("[atention]"); }),
              HasSubstr("'atention' is neither a preset of arch dit (all, attention, attention_mlp) nor a module pattern"));
}

TEST(TrainModel, LoraBaseIsLoadedAndFrozen) {
  fs::path dir = temp_dir("frozen");
  std::string base = save_base(dir);
  auto model = build_model(lora_config(base, "lora", 4), kGeometry, Device::cpu());
  SafetensorsFile file = SafetensorsFile::open(base);
  EXPECT_EQ(model->parameter("blocks.1.attn.q.weight").to_vector<float>(),
            file.get("blocks.1.attn.q.weight").to_vector<float>());
  for (const auto& [name, tensor] : model->trainable_parameters())
    EXPECT_TRUE(name.find("lora_down") != std::string::npos || name.find("lora_up") != std::string::npos) << name;
  // Default targets: q, kv, proj, fc1, fc2 of every block.
  EXPECT_EQ(nn::find_adapters(*model).size(), 10u);
}

TEST(TrainModel, SavedLoraHasKohyaKeysShapesAndMetadata) {
  fs::path dir = temp_dir("keys");
  std::string base = save_base(dir);
  TrainConfig config = lora_config(base, "lora", 4, {"network.linear_alpha=2"});
  auto model = build_model(config, kGeometry, Device::cpu());
  std::string path = (dir / "lora" / "t.safetensors").string();
  save_lora(*model, config, path, 123, "abc123");
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names().size(), 30u);  // 10 modules x (down, up, alpha)
  EXPECT_EQ(file.info("lora_unet_blocks_0_attn_q.lora_down.weight").shape, Shape({4, 32}));
  EXPECT_EQ(file.info("lora_unet_blocks_0_attn_q.lora_up.weight").shape, Shape({32, 4}));
  EXPECT_EQ(file.info("lora_unet_blocks_0_attn_kv.lora_up.weight").shape, Shape({64, 4}));
  EXPECT_EQ(file.info("lora_unet_blocks_1_mlp_fc1.lora_up.weight").shape, Shape({128, 4}));
  EXPECT_EQ(file.info("lora_unet_blocks_1_mlp_fc2.lora_down.weight").shape, Shape({4, 128}));
  EXPECT_EQ(file.info("lora_unet_blocks_1_mlp_fc2.alpha").shape, Shape({}));
  EXPECT_DOUBLE_EQ(file.get("lora_unet_blocks_1_mlp_fc2.alpha").item(), 2.0);
  EXPECT_EQ(file.info("lora_unet_blocks_0_attn_q.lora_down.weight").dtype, "F32");  // save.dtype
  const auto& meta = file.metadata();
  EXPECT_EQ(meta.at("ss_network_dim"), "4");
  EXPECT_EQ(meta.at("ss_network_alpha"), "2");
  EXPECT_EQ(meta.at("ss_network_module"), "networks.lora");
  EXPECT_EQ(meta.at("ss_base_model_hash"), "abc123");
  EXPECT_EQ(meta.at("ss_steps"), "123");
  EXPECT_EQ(meta.at("wick_network_type"), "lora");
  EXPECT_EQ(parse_config_string(meta.at("wick_config"), "<metadata>", config_schema()), config);

  TrainConfig half = lora_config(base, "lora", 4);
  half.save.dtype = DType::BF16;
  save_lora(*model, half, path, 1, "");
  EXPECT_EQ(SafetensorsFile::open(path).info("lora_unet_blocks_0_attn_q.lora_up.weight").dtype, "BF16");
}

TEST(TrainModel, LoraAndDoraRoundTrip) {
  fs::path dir = temp_dir("roundtrip");
  std::string base = save_base(dir);
  for (const char* type : {"lora", "dora"}) {
    TrainConfig config = lora_config(base, type, 4);
    auto a = build_model(config, kGeometry, Device::cpu());
    randomize_adapters(*a, 5);
    std::string path = (dir / (std::string(type) + ".safetensors")).string();
    save_lora(*a, config, path, 7, "");
    if (std::string(type) == "dora") {
      SafetensorsFile file = SafetensorsFile::open(path);
      EXPECT_EQ(file.info("lora_unet_blocks_0_attn_kv.dora_scale").shape, Shape({1, 32}));
      EXPECT_EQ(file.metadata().at("ss_network_module"), "lycoris.kohya");
      EXPECT_EQ(file.metadata().at("wick_network_type"), "dora");
    }
    auto b = build_model(config, kGeometry, Device::cpu());
    load_lora(*b, path);
    auto pa = a->named_parameters(), pb = b->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << type << " " << pa[i].first;
  }
}

TEST(TrainModel, LoadingAMismatchedLoraFileIsADataError) {
  fs::path dir = temp_dir("mismatched");
  std::string base = save_base(dir);
  TrainConfig rank4 = lora_config(base, "lora", 4);
  std::string path = (dir / "r4.safetensors").string();
  save_lora(*build_model(rank4, kGeometry, Device::cpu()), rank4, path, 1, "");

  auto rank8 = build_model(lora_config(base, "lora", 8), kGeometry, Device::cpu());
  try {
    load_lora(*rank8, path);
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("'lora_unet_blocks_0_attn_q' has lora_down [4, 32]"));
  }
  auto attention_only = build_model(lora_config(base, "lora", 4, {"network.target=['*attn*']"}), kGeometry,
                                    Device::cpu());
  EXPECT_THAT(error_of([&] { load_lora(*attention_only, path); }), HasSubstr("belongs to no adapter"));
  auto dora = build_model(lora_config(base, "dora", 4), kGeometry, Device::cpu());
  EXPECT_THAT(error_of([&] { load_lora(*dora, path); }), HasSubstr("is LoRA in the file but the model's adapter is DoRA"));
  auto other_alpha = build_model(lora_config(base, "lora", 4, {"network.linear_alpha=1"}), kGeometry, Device::cpu());
  EXPECT_THAT(error_of([&] { load_lora(*other_alpha, path); }), HasSubstr("alpha"));
  auto full = build_model(tiny_config(), kGeometry, Device::cpu());
  EXPECT_THAT(error_of([&] { load_lora(*full, path); }), HasSubstr("no adapters"));
}

// A LoRA on a Conv2d is written in kohya's LoCon shapes and loads back; an output-axis (PEFT) DoRA
// has no kohya form: save_lora refuses it, and a kohya DoRA file does not load into it.
class ConvAndLinear : public Module {
 public:
  ConvAndLinear() {
    register_module("conv_in", std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1}));
    register_module("proj", std::make_shared<nn::Linear>(8, 4));
  }
};

TEST(TrainModel, LoraOnAConvSavesLoConShapesAndOutputAxisDoraIsRefused) {
  fs::path dir = temp_dir("conv");
  TrainConfig config = tiny_config({"save.dtype=f32"});  // save_lora reads only save.dtype and the YAML from it
  auto a = std::make_shared<ConvAndLinear>();
  nn::apply_adapters(*a, {.type = "lora", .patterns = {"*"}, .options = {.rank = 2, .alpha = 16.0}});
  randomize_adapters(*a, 9);
  std::string path = (dir / "locon.safetensors").string();
  save_lora(*a, config, path, 1, "");
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.info("lora_unet_conv_in.lora_down.weight").shape, Shape({2, 3, 3, 3}));
  EXPECT_EQ(file.info("lora_unet_conv_in.lora_up.weight").shape, Shape({8, 2, 1, 1}));
  EXPECT_EQ(file.info("lora_unet_proj.lora_down.weight").shape, Shape({2, 8}));
  auto b = std::make_shared<ConvAndLinear>();
  nn::apply_adapters(*b, {.type = "lora", .patterns = {"*"}, .options = {.rank = 2, .alpha = 16.0}});
  load_lora(*b, path);
  auto pa = nn::find_adapters(*a), pb = nn::find_adapters(*b);
  ASSERT_EQ(pa.size(), 2u);
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second->up_weight().to_vector<float>(), pb[i].second->up_weight().to_vector<float>());

  auto dora = std::make_shared<ConvAndLinear>();
  nn::apply_adapters(*dora, {.type = "dora", .patterns = {"proj"},
                             .options = {.rank = 2, .alpha = 16.0, .dora_axis = nn::DoraAxis::Output}});
  EXPECT_THAT(error_of([&] { save_lora(*dora, config, (dir / "dora.safetensors").string(), 1, ""); }),
              HasSubstr("output-axis magnitude"));
  auto input_dora = std::make_shared<ConvAndLinear>();
  nn::apply_adapters(*input_dora, {.type = "dora", .patterns = {"proj"}, .options = {.rank = 2, .alpha = 16.0}});
  const std::string kohya_dora = (dir / "kohya_dora.safetensors").string();
  save_lora(*input_dora, config, kohya_dora, 1, "");
  EXPECT_THAT(error_of([&] { load_lora(*dora, kohya_dora); }), HasSubstr("kohya files carry the input-axis [1, in]"));
}

TEST(TrainModel, KohyaNames) {
  EXPECT_EQ(kohya_module_name("blocks.0.attn.q"), "lora_unet_blocks_0_attn_q");
  EXPECT_EQ(kohya_module_name("final_layer.adaLN_modulation.1"), "lora_unet_final_layer_adaLN_modulation_1");
}

}  // namespace
}  // namespace wick
