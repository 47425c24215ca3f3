// User-facing optimizers over named trainable parameters, packed into one flat f32 master buffer.
//
//   std::vector<std::pair<std::string, Tensor>> params = {{"proj.weight", w}, {"proj.bias", b}};
//   std::unique_ptr<Optimizer> opt = make_optimizer("adamw8bit", params, {.weight_decay = 1e-2f,
//                                                                        .max_grad_norm = 1.0f});
//   GradientStore grads = autograd::backward(loss);
//   StepReport r = opt->step(grads, lr);        // clip, fused step, write back into w and b in place
//   save_safetensors("optim.safetensors", opt->state_tensors());   // ... opt->load_state(tensors)
//
// Layout (docs/optimizers.md): parameters keeping 8-bit state come first, then the 32-bit ones,
// each in the given order, each starting at a multiple of 256 elements (zero padding between),
// so the buffer splits into an 8-bit region and a 32-bit region (one fused call each) and can be
// sharded on 256-element block boundaries. Every parameter's master is an f32 copy in the buffer;
// after each step it is cast back into the parameter tensor (same storage, same pointer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/optim/flat_optimizers.h"
#include "runtime/tensor.h"

namespace wick {

using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// Hyperparameters shared by the optimizers (each reads the fields it uses); the lr comes with
// each step (see lr_schedule.h).
struct OptimizerConfig {
  float beta1 = 0.9f;           // adamw, adamw8bit
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;   // all three (sgd: L2 added to the gradient, as torch.optim.SGD)
  float momentum = 0.0f;        // sgd
  float dampening = 0.0f;
  bool nesterov = false;
  float max_grad_norm = 0.0f;   // global L2 norm clipping before the step; 0 = off
};

struct StepReport {
  int64_t n_nonfinite = 0;  // gradient elements skipped by the non-finite rule
  int64_t n_missing = 0;    // parameters with no gradient in the store (stepped with zeros)
  float grad_norm = 0.0f;   // global L2 norm of the gradients before clipping (NaN/Inf if any is)
  bool clipped = false;     // the gradients were scaled by max_grad_norm / (grad_norm + 1e-6)
};

// One trainable parameter's place in the flat buffers.
struct ParameterSlot {
  std::string name;
  Tensor parameter;  // the user's tensor (any float dtype, any strides), updated in place
  Tensor master;     // f32 view of the flat master buffer, parameter's shape
  Tensor grad;       // f32 view of the flat gradient buffer, parameter's shape
  int64_t offset = 0;  // first element in the flat buffers (a multiple of 256)
  int64_t numel = 0;
  bool eight_bit = false;
};

// Receives the local sum of squared gradients (an f32 0-d tensor on the parameters' device)
// and returns the global one (e.g. after an all-reduce across data-parallel ranks).
using SquaredNormReducer = std::function<Tensor(const Tensor& local_sum_of_squares)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "sgd", "adamw", "adamw8bit".
  virtual const char* name() const = 0;

  // One step with learning rate lr: gathers the gradients of every parameter from `grads`
  // (missing -> zeros, counted), clips to max_grad_norm, runs the fused update over the flat
  // buffers and writes the masters back into the parameters. Elements with a non-finite
  // gradient are skipped (docs/optimizers.md). Synchronizes once at the end to read the norm and
  // the count; with max_grad_norm > 0 also once before the update (the norm sets the scale).
  StepReport step(const autograd::GradientStore& grads, float lr);
  // The same step over gradients already in flat_gradient() (placed and reduced there by
  // GradientBuckets, engine/distributed/gradient_buckets.h); n_missing is reported as given. With a
  // sharded state (shard_state) only the owned range of flat_gradient() is read, grad_norm is the
  // norm over every rank's range, and n_nonfinite counts this rank's range.
  StepReport step_reduced(float lr, int64_t n_missing = 0);
  // The flat f32 gradient buffer [flat_numel()] (padding zero); parameters()[i].grad are views of it.
  const Tensor& flat_gradient() const { return flat_grad_; }

  // Optimizer steps taken (the t of the bias corrections is steps_taken() + 1 at the next step).
  int64_t steps_taken() const { return step_; }
  const std::vector<ParameterSlot>& parameters() const { return slots_; }
  const OptimizerConfig& config() const { return config_; }
  // Bytes of optimizer state (moments / momentum, not the masters), summed over parameters
  // without padding: 8-bit AdamW 2n + 8·ceil(n/256), AdamW 8n, SGD 4n (0 without momentum).
  int64_t state_bytes() const;
  int64_t state_bytes(const std::string& parameter_name) const;
  // Elements of the flat buffers (with padding) and where the 32-bit region starts.
  int64_t flat_numel() const { return flat_master_.numel(); }
  int64_t region_32bit_offset() const { return n_8bit_flat_; }

  // The hook for data-parallel training: the clipping norm is sqrt(reducer(local sum)). Not with a
  // sharded state (whose norm is global already): throws.
  void set_squared_norm_reducer(SquaredNormReducer reducer);

  // ZeRO-1 (engine/distributed/zero.h sets this up over a process group): keep optimizer state only
  // for the flat range [begin, end) (multiples of 256, or end == flat_numel()), update only that
  // range of the masters, and read only that range of the flat gradient (GradientBuckets
  // reduce-scatters into it; the rest of the buffer may hold anything). `gather(own, granule)` is an
  // all-gather over the ranks' ranges: `own` holds one f32 value per `granule` flat elements of this
  // rank's range (granule 1 or 256); it returns every rank's values in flat order,
  // [flat_numel() / granule], equal on every rank and valid until the next call. It makes the masters
  // whole after each update and collects the clipping norm's partial sums. Only before the first
  // step; the state is reset to zeros. state_tensors()/load_state() then refuse (use the shard
  // functions of engine/checkpoint/optimizer_shards.h).
  using RangeGather = std::function<Tensor(const Tensor& own, int64_t granule)>;
  void shard_state(int64_t begin, int64_t end, RangeGather gather);
  bool sharded() const { return static_cast<bool>(gather_); }
  std::pair<int64_t, int64_t> owned_range() const { return {owned_begin_, owned_end_}; }
  // The state of parameter elements [begin, end) of `slot` as views, names without the parameter
  // prefix ("m", "v", "m_codes", "absmax_m", ..., and "master" for 16-bit parameters); blockwise
  // state (absmax) covers the blocks the range touches. The range must lie in owned_range().
  NamedTensors state_range(const ParameterSlot& slot, int64_t begin, int64_t end) const;
  // Re-gathers the masters across ranks (sharded) and writes them into the parameters; used after
  // a shard's state was loaded.
  void gather_and_write_back();
  // Sets steps_taken() (restoring a sharded state, engine/checkpoint/optimizer_shards.h).
  void set_steps_taken(int64_t steps);
  const Tensor& flat_master() const { return flat_master_; }

  // The state as named tensors: "step" (i64 0-d), per parameter "<name>.<state>" (m, v or
  // m_codes, v_codes, absmax_m, absmax_v or momentum, unpadded) and "<name>.master" (f32) for 16-bit
  // parameters, whose f32 master is finer than the parameter. Views of live memory: save them
  // before the next step.
  NamedTensors state_tensors() const;
  // Restores state_tensors() output (any device): exactly the same names, shapes and dtypes, else
  // throws naming the first problem. Masters of f32 parameters are re-read from the parameters
  // (load the model weights first); 16-bit masters come from "<name>.master", and the
  // parameters are set from them.
  void load_state(const NamedTensors& tensors);
  // Re-reads every master from its parameter (after the parameters were changed from outside,
  // e.g. weights loaded). 16-bit parameters lose the master's extra precision.
  void reload_parameters();

 protected:
  // Lays out the flat buffers; eight_bit(n) says which parameters keep 8-bit state.
  Optimizer(const NamedParameters& params, const OptimizerConfig& config, const std::function<bool(int64_t)>& eight_bit);

  // The fused update of the owned flat range for step t (1-based); adds the skipped elements to
  // n_nonfinite (an i64 0-d tensor on the parameters' device) without synchronizing.
  virtual void update(float lr, int64_t t, const Tensor& n_nonfinite) = 0;
  // Elements [begin, end) of the slot's state as views (names without the parameter prefix); the
  // range lies in owned_range().
  virtual NamedTensors slot_state(const ParameterSlot& slot, int64_t begin, int64_t end) const = 0;
  // (Re)allocates all state, zeroed, for the owned part of each region (owned_region).
  virtual void allocate_state() = 0;
  // Sets all state (padding included) to its initial zeros.
  virtual void zero_state() = 0;

  // The owned part of the 8-bit or 32-bit region of a flat buffer (the whole region unsharded).
  Tensor region(const Tensor& flat, bool eight_bit) const;
  // [begin, end) in flat elements of the owned part of a region.
  std::pair<int64_t, int64_t> owned_region(bool eight_bit) const;
  Tensor flat_master_, flat_grad_;  // f32 [flat_numel()] on the parameters' device
  int64_t n_8bit_flat_ = 0;         // elements (with padding) of the 8-bit region, a multiple of 256
  Device device_;

 private:
  float clip_coefficient(float grad_norm);
  // The global sum of squares of the gradient (only the finite elements': finite_only), as an f32
  // 0-d tensor on the device, through the reducer or the sharded gather.
  Tensor squared_norm(bool finite_only);
  Tensor owned_gradient() const { return flat_grad_.narrow(0, owned_begin_, owned_end_ - owned_begin_); }
  void write_back();

  OptimizerConfig config_;
  std::vector<ParameterSlot> slots_;
  SquaredNormReducer reducer_;
  RangeGather gather_;
  int64_t owned_begin_ = 0, owned_end_ = 0;  // [0, flat_numel()) unless sharded
  int64_t step_ = 0;
};

// The registry: "sgd", "adamw" (32-bit state) or "adamw8bit" (8-bit state for parameters of at
// least 4096 elements, 32-bit below). Throws for an unknown name (listing the valid ones), an
// empty list, a parameter that does not require a gradient or is not a leaf, a non-float dtype,
// repeated names or tensors, or parameters on different devices.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const NamedParameters& params,
                                          const OptimizerConfig& config = {});
std::vector<std::string> optimizer_names();

}  // namespace wick
