#include "models/memory/training_plan.h"

#include <memory>

#include "engine/module.h"

namespace wick {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<ParameterInfo> planned_parameters(const std::map<std::string, Shape>& shapes, DType dtype,
                                              const TrainingPlan& plan) {
  const bool full = plan.network == "full";
  const bool dora = plan.network == "dora";
  std::vector<ParameterInfo> out;
  for (const auto& [name, shape] : shapes) {
    out.push_back({name, numel(shape), dtype, full, shape});
    const std::string suffix = ".weight";
    if (full || shape.size() != 2 || !ends_with(name, suffix)) continue;
    const std::string path = name.substr(0, name.size() - suffix.size());
    bool matched = false;
    for (const std::string& pattern : plan.patterns) matched = matched || glob_match(pattern, path);
    if (!matched) continue;
    const int64_t out_features = shape[0], in_features = shape[1];
    out.push_back({path + ".lora_down.weight", plan.rank * in_features, DType::F32, true, {plan.rank, in_features}});
    out.push_back({path + ".lora_up.weight", out_features * plan.rank, DType::F32, true, {out_features, plan.rank}});
    if (dora) out.push_back({path + ".dora_scale", in_features, DType::F32, true, {1, in_features}});
  }
  return out;
}

LayerTrainingOf planned_layer_training(const std::map<std::string, Shape>& shapes, const TrainingPlan& plan) {
  if (plan.network == "full") return [](const std::string&) { return LayerTraining{.trainable = true}; };
  auto linears = std::make_shared<std::map<std::string, LayerTraining>>();
  const std::string suffix = ".lora_down.weight";
  for (const ParameterInfo& p : planned_parameters(shapes, DType::F32, plan))
    if (ends_with(p.name, suffix))
      (*linears)[p.name.substr(0, p.name.size() - suffix.size())] =
          LayerTraining{.rank = plan.rank, .dora = plan.network == "dora"};
  return [linears](const std::string& path) {
    auto found = linears->find(path);
    return found == linears->end() ? LayerTraining{} : found->second;
  };
}

MemoryEstimate estimate_planned_memory(const PlannedModel& model, const TrainingPlan& plan, const ProfileOf& profile_of,
                                       const MemoryInputs& given) {
  MemoryInputs in = given;
  if (in.block_paths.empty()) in.block_paths = model.block_paths;
  const ActivationShape shape{.batch = in.batch_size,
                              .latent_height = in.latent_height,
                              .latent_width = in.latent_width,
                              .text_length = in.text_length,
                              .dtype = in.compute_dtype,
                              .device = in.device};
  const LayerTrainingOf of = planned_layer_training(model.shapes, plan);
  return estimate_training_memory(planned_parameters(model.shapes, model.dtype, plan), profile_of(shape, true, of),
                                  profile_of(shape, false, of), in);
}

}  // namespace wick
