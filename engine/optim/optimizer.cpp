// Optimizer: flat-buffer layout, gradient gathering, global-norm clipping, write-back and state
// save/restore; SgdOptimizer and AdamWOptimizer supply the fused update and the state tensors.
#include "engine/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "engine/autograd/node.h"
#include "engine/optim/flat_optimizer_kernels.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#if WICK_HAS_CUDA
#include "runtime/cuda/cuda_api.h"
#endif

namespace wick {
namespace {

int64_t round_up_to_block(int64_t n) {
  return (n + quantization_block_size - 1) / quantization_block_size * quantization_block_size;
}

Tensor zeros_f32(int64_t n, Device device) {
  Tensor t = Tensor::empty({n}, DType::F32, device);
  copy_into(t, Tensor::scalar(0.0));
  return t;
}

void fill_zero(const Tensor& t) {
  if (t.defined()) copy_into(t, Tensor::scalar(0.0, t.dtype()));
}

bool is_16bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

// The sum of a 1-d tensor as an f32 0-d tensor, in stages of rows of 256 while the length allows.
// The stages fix the order of the additions independently of the device's reduction kernels, so the
// fused first stage on CUDA (first_norm_stage below) gives bitwise the tensor ops' result. (It was
// introduced when CUDA ran a whole-tensor sum in one thread block: ~50 ms for 256M elements.)
Tensor staged_sum(Tensor t) {
  const std::vector<int64_t> row = {1};
  while (t.numel() > 65536 && t.numel() % quantization_block_size == 0)
    t = sum(t.view({-1, quantization_block_size}), row);
  return sum(t);
}

// The clipping norm's squared sum over the flat gradient g is staged_sum(square(g)). Its first
// stage, for a flat buffer of more than 65,536 elements (a multiple of 256), sums the squares of
// each 256-element row; a smaller buffer is summed whole, so there the "first stage" is the squares
// themselves. The granule is the number of flat elements behind one first-stage value.
int64_t norm_granule(int64_t flat_numel) { return flat_numel > 65536 ? quantization_block_size : 1; }

// The first stage over `g`, a 256-aligned range of the flat gradient: one f32 value per `granule`
// elements, each depending on its own elements only, so a sharded optimizer computes its range's
// values, gathers every rank's, and staged_sum() of them is bitwise the unsharded sum.
// finite_only: NaN and ±Inf count as 0. On CUDA the rows of 256 are one fused pass without the
// squares' temporary, with the same additions.
Tensor first_norm_stage(const Tensor& g, int64_t granule, bool finite_only) {
  if (g.numel() == 0) return Tensor::empty({0}, DType::F32, g.device());
#if WICK_HAS_CUDA
  if (!finite_only && granule > 1 && g.device().is_cuda()) {
    cuda::set_device(g.device().index);
    Tensor rows = Tensor::empty({g.numel() / granule}, DType::F32, g.device());
    cuda::row_sums_of_squares(g.data_as<float>(), rows.numel(), rows.data_as<float>(),
                              current_stream(g.device()).handle);
    return rows;
  }
#endif
  Tensor squares = square(g);
  if (finite_only) {
    Tensor finite = lt(abs(g), std::numeric_limits<double>::infinity());  // false for NaN and ±Inf
    squares = where(finite, squares, Tensor::scalar(0.0, DType::F32, g.device()));
  }
  return granule == 1 ? squares : sum(squares.view({-1, granule}), {1});
}

// g *= coefficient in place (f32, as mul(g, coefficient)); on CUDA one pass without a temporary.
void scale_in_place(const Tensor& g, float coefficient) {
#if WICK_HAS_CUDA
  if (g.device().is_cuda()) {
    cuda::set_device(g.device().index);
    cuda::scale(g.data_as<float>(), g.numel(), coefficient, current_stream(g.device()).handle);
    return;
  }
#endif
  copy_into(g, mul(g, static_cast<double>(coefficient)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Optimizer

Optimizer::Optimizer(const NamedParameters& params, const OptimizerConfig& config,
                     const std::function<bool(int64_t)>& eight_bit)
    : config_(config) {
  WICK_CHECK(!params.empty(), "optimizer: no parameter is trainable: did the network.target patterns match any "
             "module?");
  WICK_CHECK(std::isfinite(config.max_grad_norm) && config.max_grad_norm >= 0.0f,
             "optimizer: max_grad_norm must be >= 0 (0 = no clipping), got ", config.max_grad_norm);
  std::set<std::string> names;
  std::set<uint64_t> ids;
  for (const auto& [name, tensor] : params) {
    WICK_CHECK(!name.empty(), "optimizer: a parameter has an empty name");
    WICK_CHECK(names.insert(name).second, "optimizer: parameter \"", name, "\" is listed twice");
    WICK_CHECK(tensor.defined(), "optimizer: parameter \"", name, "\" is an undefined tensor");
    WICK_CHECK(ids.insert(tensor.id()).second, "optimizer: parameter \"", name,
               "\" is the same tensor as an earlier parameter");
    WICK_CHECK(autograd::requires_grad(tensor), "optimizer: parameter \"", name, "\" (", tensor.describe(),
               ") does not require a gradient: it is frozen; pass only trainable parameters (set_requires_grad)");
    WICK_CHECK(autograd::is_leaf(tensor), "optimizer: parameter \"", name, "\" (", tensor.describe(),
               ") is the output of an op, not a leaf tensor");
    WICK_CHECK(tensor.dtype() == DType::F32 || is_16bit(tensor.dtype()), "optimizer: parameter \"", name, "\" is ",
               tensor.describe(), "; parameters must be f32, bf16 or f16");
    WICK_CHECK(tensor.device() == params.front().second.device(), "optimizer: parameter \"", name, "\" is on ",
               tensor.device().str(), " but \"", params.front().first, "\" is on ",
               params.front().second.device().str(), "; all parameters must share one device");
  }
  device_ = params.front().second.device();

  // 8-bit parameters first, then the 32-bit ones; each starts on a 256-element block boundary.
  int64_t offset = 0;
  for (bool region_8bit : {true, false}) {
    for (const auto& [name, tensor] : params) {
      if (eight_bit(tensor.numel()) != region_8bit) continue;
      ParameterSlot slot;
      slot.name = name;
      slot.parameter = tensor;
      slot.offset = offset;
      slot.numel = tensor.numel();
      slot.eight_bit = region_8bit;
      slots_.push_back(std::move(slot));
      offset += round_up_to_block(tensor.numel());
    }
    if (region_8bit) n_8bit_flat_ = offset;
  }
  flat_master_ = zeros_f32(offset, device_);
  flat_grad_ = zeros_f32(offset, device_);
  owned_end_ = offset;
  for (ParameterSlot& slot : slots_) {
    slot.master = flat_master_.narrow(0, slot.offset, slot.numel).view(slot.parameter.shape());
    slot.grad = flat_grad_.narrow(0, slot.offset, slot.numel).view(slot.parameter.shape());
    copy_into(slot.master, slot.parameter);
  }
}

std::pair<int64_t, int64_t> Optimizer::owned_region(bool eight_bit) const {
  int64_t lo = eight_bit ? 0 : n_8bit_flat_, hi = eight_bit ? n_8bit_flat_ : flat_master_.numel();
  int64_t begin = std::clamp(owned_begin_, lo, hi), end = std::clamp(owned_end_, lo, hi);
  return {begin, std::max(begin, end)};
}

Tensor Optimizer::region(const Tensor& flat, bool eight_bit) const {
  auto [begin, end] = owned_region(eight_bit);
  return flat.narrow(0, begin, end - begin);
}

void Optimizer::set_squared_norm_reducer(SquaredNormReducer reducer) {
  WICK_CHECK(!sharded(), "optimizer ", name(), ": set_squared_norm_reducer on a sharded (ZeRO-1) state, whose "
             "clipping norm is already gathered over every rank's range");
  reducer_ = std::move(reducer);
}

void Optimizer::shard_state(int64_t begin, int64_t end, RangeGather gather) {
  const int64_t n = flat_master_.numel(), block = quantization_block_size;
  WICK_CHECK(step_ == 0, "optimizer ", name(), ": shard_state after ", step_, " steps; shard before the first step");
  WICK_CHECK(gather != nullptr, "optimizer ", name(), ": shard_state needs a gather function");
  WICK_CHECK(reducer_ == nullptr, "optimizer ", name(), ": shard_state with a squared-norm reducer set; a sharded "
             "state gathers the norm itself");
  WICK_CHECK(0 <= begin && begin <= end && end <= n && begin % block == 0 && (end % block == 0 || end == n),
             "optimizer ", name(), ": shard range [", begin, ", ", end, ") is not a block-aligned range of the ",
             n, "-element flat buffers");
  owned_begin_ = begin;
  owned_end_ = end;
  gather_ = std::move(gather);
  allocate_state();
}

NamedTensors Optimizer::state_range(const ParameterSlot& slot, int64_t begin, int64_t end) const {
  WICK_CHECK(0 <= begin && begin <= end && end <= slot.numel && slot.offset + begin >= owned_begin_ &&
                 slot.offset + end <= owned_end_,
             "optimizer ", name(), ": elements [", begin, ", ", end, ") of \"", slot.name,
             "\" are not in this rank's range [", owned_begin_, ", ", owned_end_, ")");
  NamedTensors out;
  if (is_16bit(slot.parameter.dtype()))
    out.emplace_back("master", flat_master_.narrow(0, slot.offset + begin, end - begin));
  for (auto& entry : slot_state(slot, begin, end)) out.push_back(std::move(entry));
  return out;
}

void Optimizer::set_steps_taken(int64_t steps) {
  WICK_CHECK(steps >= 0, "optimizer ", name(), ": steps must be >= 0, got ", steps);
  step_ = steps;
}

void Optimizer::gather_and_write_back() {
  if (gather_) copy_into(flat_master_, gather_(flat_master_.narrow(0, owned_begin_, owned_end_ - owned_begin_), 1));
  write_back();
}

StepReport Optimizer::step(const autograd::GradientStore& grads, float lr) {
  WICK_CHECK(std::isfinite(lr) && lr >= 0.0f, "optimizer ", name(), ": lr must be finite and >= 0, got ", lr);
  StepReport report;
  for (const ParameterSlot& slot : slots_) {
    Tensor grad = grads.get(slot.parameter);
    if (!grad.defined()) {
      fill_zero(slot.grad);
      report.n_missing += 1;
      continue;
    }
    WICK_CHECK(grad.shape() == slot.parameter.shape(), "optimizer ", name(), ": the gradient of \"", slot.name,
               "\" is ", grad.describe(), ", the parameter ", slot.parameter.describe());
    copy_into(slot.grad, grad);
  }
  return step_reduced(lr, report.n_missing);
}

StepReport Optimizer::step_reduced(float lr, int64_t n_missing) {
  WICK_CHECK(std::isfinite(lr) && lr >= 0.0f, "optimizer ", name(), ": lr must be finite and >= 0, got ", lr);
  StepReport report;
  report.n_missing = n_missing;
  // The squared norm stays on the device until the end unless clipping needs it now; the skipped
  // elements are counted on the device too: one synchronization without clipping, two with (a
  // sharded state's gather of the norm's partial sums waits for them once more).
  Tensor squared = squared_norm(/*finite_only=*/false);
  if (config_.max_grad_norm > 0.0f) {
    report.grad_norm = static_cast<float>(std::sqrt(squared.item()));
    float coefficient = clip_coefficient(report.grad_norm);
    if (coefficient < 1.0f) {
      scale_in_place(owned_gradient(), coefficient);
      report.clipped = true;
    }
  }
  int64_t t = step_ + 1;
  Tensor n_nonfinite = Tensor::scalar(0.0, DType::I64, device_);
  update(lr, t, n_nonfinite);
  step_ = t;
  gather_and_write_back();
  if (config_.max_grad_norm <= 0.0f) report.grad_norm = static_cast<float>(std::sqrt(squared.item()));
  report.n_nonfinite = static_cast<int64_t>(n_nonfinite.item());
  return report;
}

// As torch.nn.utils.clip_grad_norm_: coefficient = max_norm / (norm + 1e-6) in f32 (>= 1: no
// clipping). When the norm is non-finite, the coefficient uses the norm of the finite elements
// (the others are skipped).
float Optimizer::clip_coefficient(float grad_norm) {
  float norm = grad_norm;
  if (!std::isfinite(norm)) norm = static_cast<float>(std::sqrt(squared_norm(/*finite_only=*/true).item()));
  return config_.max_grad_norm / (norm + 1e-6f);
}

// Unsharded: staged_sum over the whole flat gradient, then the reducer. Sharded: the first stage
// over the owned range, gathered from every rank in flat order, then the same staged sum, so the
// result is bitwise the unsharded one for the same gradient values, however the ranges are cut; a
// non-finite element on any rank makes the norm non-finite on every rank.
Tensor Optimizer::squared_norm(bool finite_only) {
  const int64_t granule = norm_granule(flat_master_.numel());
  if (!gather_) {
    Tensor local = staged_sum(first_norm_stage(flat_grad_, granule, finite_only));
    return reducer_ ? reducer_(local) : local;
  }
  return staged_sum(gather_(first_norm_stage(owned_gradient(), granule, finite_only), granule));
}

void Optimizer::write_back() {
  for (const ParameterSlot& slot : slots_) copy_into(slot.parameter, slot.master);
}

void Optimizer::reload_parameters() {
  for (const ParameterSlot& slot : slots_) copy_into(slot.master, slot.parameter);
}

int64_t Optimizer::state_bytes() const {
  int64_t total = 0;
  for (const ParameterSlot& slot : slots_) total += state_bytes(slot.name);
  return total;
}

int64_t Optimizer::state_bytes(const std::string& parameter_name) const {
  auto found = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.name == parameter_name; });
  WICK_CHECK(found != slots_.end(), "optimizer ", name(), ": no parameter \"", parameter_name, "\"");
  int64_t total = 0;
  int64_t begin = std::clamp(owned_begin_ - found->offset, int64_t{0}, found->numel);
  int64_t end = std::clamp(owned_end_ - found->offset, begin, found->numel);
  if (end > begin)
    for (const auto& [state_name, tensor] : slot_state(*found, begin, end)) total += static_cast<int64_t>(tensor.nbytes());
  return total;
}

NamedTensors Optimizer::state_tensors() const {
  WICK_CHECK(!sharded(), "optimizer ", name(), ": the state is sharded (ZeRO-1); save it with "
             "local_optimizer_shard (engine/checkpoint/optimizer_shards.h)");
  NamedTensors out;
  out.emplace_back("step", Tensor::scalar(static_cast<double>(step_), DType::I64));
  for (const ParameterSlot& slot : slots_) {
    if (is_16bit(slot.parameter.dtype())) out.emplace_back(slot.name + ".master", slot.master);
    for (auto& [state_name, tensor] : slot_state(slot, 0, slot.numel))
      out.emplace_back(slot.name + "." + state_name, tensor);
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& tensors) {
  const std::string op = std::string("optimizer ") + name() + " load_state";
  WICK_CHECK(!sharded(), op, ": the state is sharded (ZeRO-1); load it with load_optimizer_shard_into "
             "(engine/checkpoint/optimizer_shards.h)");
  NamedTensors expected = state_tensors();
  std::map<std::string, Tensor> given;
  for (const auto& [tensor_name, tensor] : tensors) {
    WICK_CHECK(given.emplace(tensor_name, tensor).second, op, ": tensor \"", tensor_name, "\" appears twice");
  }
  std::set<std::string> expected_names;
  for (const auto& [tensor_name, target] : expected) {
    expected_names.insert(tensor_name);
    auto found = given.find(tensor_name);
    WICK_CHECK(found != given.end(), op, ": missing tensor \"", tensor_name, "\" (the checkpoint was written for "
               "other parameters or another optimizer?)");
    const Tensor& source = found->second;
    WICK_CHECK(source.defined(), op, ": tensor \"", tensor_name, "\" is undefined");
    WICK_CHECK(source.shape() == target.shape() && source.dtype() == target.dtype(), op, ": tensor \"",
               tensor_name, "\" is ", source.describe(), ", expected ", target.describe());
  }
  for (const auto& [tensor_name, tensor] : given)
    WICK_CHECK(expected_names.count(tensor_name) != 0, op, ": unexpected tensor \"", tensor_name,
               "\" (no parameter or state of that name in this ", name(), " optimizer)");
  int64_t step = given.at("step").to_vector<int64_t>()[0];
  WICK_CHECK(step >= 0, op, ": \"step\" must be >= 0, got ", step);

  zero_state();  // padding included
  for (const auto& [tensor_name, target] : expected)
    if (tensor_name != "step") copy_into(target, given.at(tensor_name));
  step_ = step;
  for (const ParameterSlot& slot : slots_) {
    if (is_16bit(slot.parameter.dtype())) copy_into(slot.parameter, slot.master);
    else copy_into(slot.master, slot.parameter);
  }
}

// ---------------------------------------------------------------------------------------------
// The optimizers

namespace {

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const NamedParameters& params, const OptimizerConfig& config)
      : Optimizer(params, config, [](int64_t) { return false; }) {
    WICK_CHECK(config.momentum >= 0.0f && config.dampening >= 0.0f && config.weight_decay >= 0.0f,
               "optimizer sgd: momentum, dampening and weight_decay must be >= 0");
    WICK_CHECK(!config.nesterov || (config.momentum > 0.0f && config.dampening == 0.0f),
               "optimizer sgd: nesterov needs momentum > 0 and dampening 0");
    allocate_state();
  }
  const char* name() const override { return "sgd"; }

 protected:
  void update(float lr, int64_t t, const Tensor& n_nonfinite) override {
    SgdHyper hyper{.lr = lr, .momentum = config().momentum, .dampening = config().dampening,
                   .weight_decay = config().weight_decay, .nesterov = config().nesterov, .step = t};
    auto [begin, end] = owned_range();
    sgd_step(flat_master_.narrow(0, begin, end - begin), flat_grad_.narrow(0, begin, end - begin), momentum_, hyper,
             n_nonfinite);
  }
  NamedTensors slot_state(const ParameterSlot& slot, int64_t begin, int64_t end) const override {
    if (!momentum_.defined()) return {};
    return {{"momentum", momentum_.narrow(0, slot.offset + begin - owned_range().first, end - begin)}};
  }
  void allocate_state() override {
    auto [begin, end] = owned_range();
    if (config().momentum > 0.0f) momentum_ = zeros_f32(end - begin, device_);
  }
  void zero_state() override { fill_zero(momentum_); }

 private:
  Tensor momentum_;  // f32 [flat_numel()], undefined without momentum
};

class AdamWOptimizer final : public Optimizer {
 public:
  AdamWOptimizer(const NamedParameters& params, const OptimizerConfig& config, bool allow_8bit)
      : Optimizer(params, config, [allow_8bit](int64_t n) { return allow_8bit && use_8bit_state(n); }),
        name_(allow_8bit ? "adamw8bit" : "adamw") {
    allocate_state();
  }
  const char* name() const override { return name_; }

 protected:
  void update(float lr, int64_t t, const Tensor& n_nonfinite) override {
    AdamWHyper hyper{.lr = lr, .beta1 = config().beta1, .beta2 = config().beta2, .eps = config().eps,
                     .weight_decay = config().weight_decay, .step = t};
    if (state_8bit_.numel() > 0)
      adamw_step(region(flat_master_, true), region(flat_grad_, true), state_8bit_, hyper, n_nonfinite);
    if (state_32bit_.numel() > 0)
      adamw_step(region(flat_master_, false), region(flat_grad_, false), state_32bit_, hyper, n_nonfinite);
  }
  NamedTensors slot_state(const ParameterSlot& slot, int64_t begin, int64_t end) const override {
    const int64_t block_size = quantization_block_size;
    if (slot.eight_bit) {
      int64_t offset = slot.offset + begin - owned_region(true).first;  // into the owned 8-bit state
      int64_t block = offset / block_size, n_blocks = (end - begin + block_size - 1) / block_size;
      return {{"m_codes", state_8bit_.m_codes.narrow(0, offset, end - begin)},
              {"v_codes", state_8bit_.v_codes.narrow(0, offset, end - begin)},
              {"absmax_m", state_8bit_.absmax_m.narrow(0, block, n_blocks)},
              {"absmax_v", state_8bit_.absmax_v.narrow(0, block, n_blocks)}};
    }
    int64_t offset = slot.offset + begin - owned_region(false).first;
    return {{"m", state_32bit_.m.narrow(0, offset, end - begin)}, {"v", state_32bit_.v.narrow(0, offset, end - begin)}};
  }
  void allocate_state() override {
    auto [b8, e8] = owned_region(true);
    auto [b32, e32] = owned_region(false);
    state_8bit_ = AdamWState::zeros(e8 - b8, true, device_);
    state_32bit_ = AdamWState::zeros(e32 - b32, false, device_);
  }
  void zero_state() override {
    for (const AdamWState* state : {&state_8bit_, &state_32bit_})
      for (const auto& [state_name, tensor] : adamw_state_tensors(*state)) fill_zero(tensor);
  }

 private:
  const char* name_;
  AdamWState state_8bit_;   // over the 8-bit region: codes [n8], absmax [n8 / 256]
  AdamWState state_32bit_;  // over the 32-bit region: m, v [flat_numel() - n8]
};

using Factory = std::unique_ptr<Optimizer> (*)(const NamedParameters&, const OptimizerConfig&);

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> factories = {
      {"sgd", [](const NamedParameters& p, const OptimizerConfig& c) -> std::unique_ptr<Optimizer> {
         return std::make_unique<SgdOptimizer>(p, c);
       }},
      {"adamw", [](const NamedParameters& p, const OptimizerConfig& c) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamWOptimizer>(p, c, false);
       }},
      {"adamw8bit", [](const NamedParameters& p, const OptimizerConfig& c) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamWOptimizer>(p, c, true);
       }},
  };
  return factories;
}

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const NamedParameters& params,
                                          const OptimizerConfig& config) {
  auto found = registry().find(name);
  if (found == registry().end()) {
    std::string valid;
    for (const std::string& n : optimizer_names()) valid += (valid.empty() ? "" : ", ") + n;
    WICK_CHECK(false, "make_optimizer: unknown optimizer \"", name, "\"; valid names: ", valid);
  }
  return found->second(params, config);
}

}  // namespace wick
