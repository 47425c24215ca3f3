// Modules: a tree of named layers holding named parameters — the parameter registry that
// optimizers, checkpoints and LoRA export use.
//
//   class Linear : public Module {
//     Linear(int64_t in, int64_t out) { register_parameter("weight", &weight_, Tensor::empty({out, in}, DType::F32)); }
//     Tensor weight_;
//   };
//   auto block = std::make_shared<Block>();            // registers children: register_module("attn", attn_)
//   for (auto& [name, tensor] : block->named_parameters()) ...   // "attn.qkv.weight", ...
//   block->set_trainable({"*.attn.*"}, true);          // in place: same tensor, same storage
//   load_parameters(*block, SafetensorsFile::open("w.safetensors"));   // zero-copy, frozen
//
// Names are stable and hierarchical (child names joined with '.'). A parameter slot is a Tensor
// member of the layer; loading replaces what the slot holds, so layers read their slots at call time.
// Modules are held by shared_ptr and are not copyable.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick {

class SafetensorsFile;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // A short type name for messages and summaries ("Linear").
  virtual std::string type_name() const { return "Module"; }
  // The one-input forward used by Sequential and the Keras-like API; modules with other inputs
  // provide their own call and leave this throwing.
  virtual Tensor forward(const Tensor& x);

  // Parameters and children in registration order, with dotted names.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> trainable_parameters() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;  // includes "" (this)
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::shared_ptr<Module> child(const std::string& name) const;  // nullptr if absent
  // The slot of a parameter by dotted name; throws listing close names when absent.
  Tensor& parameter(const std::string& dotted_name);
  int64_t n_parameters(bool trainable_only = false) const;

  // Marks the parameters whose names match any glob pattern ('*' any run of characters, '?' one)
  // as trainable or frozen, in place. Returns how many matched.
  int set_trainable(const std::vector<std::string>& patterns, bool trainable);
  void set_all_trainable(bool trainable);

  // Training mode (dropout on) vs evaluation mode, recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter to `device` and/or casts floating parameters to `dtype` (copies).
  void to(Device device);
  void to(DType dtype);

 protected:
  // Registers `slot` under `name`, stores `initial` in it and returns the slot. The slot must stay
  // at the same address for the module's life (a data member).
  Tensor& register_parameter(const std::string& name, Tensor* slot, Tensor initial, bool trainable = true);
  // Registers an existing slot (a wrapped layer's weight) under `name` without changing it.
  Tensor& register_parameter_slot(const std::string& name, Tensor* slot);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Swaps a registered child for another (used to wrap a layer with an adapter).
  void replace_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;

  std::vector<std::pair<std::string, Tensor*>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;

  friend std::vector<std::pair<std::string, Tensor*>> parameter_slots(const Module& module);
  friend void replace_module(Module& root, const std::string& dotted_name, std::shared_ptr<Module> module);
};

// Every parameter slot of the tree with its dotted name (for loaders that replace tensors).
std::vector<std::pair<std::string, Tensor*>> parameter_slots(const Module& module);
// Replaces the module at `dotted_name` ("blocks.3.attn.qkv") with `module`.
void replace_module(Module& root, const std::string& dotted_name, std::shared_ptr<Module> module);

// True when `name` matches the glob `pattern` ('*' any run of characters, '?' one character).
bool glob_match(const std::string& pattern, const std::string& name);

struct LoadReport {
  std::vector<std::string> loaded;      // parameters taken from the file
  std::vector<std::string> missing;     // parameters the file lacked
  std::vector<std::string> unexpected;  // tensors in the file no parameter matched
};

// Loads parameters by name from a safetensors file. A tensor whose dtype matches the slot's is
// used zero-copy (the slot then views the file's private mapping); otherwise it is cast (copied).
// Loaded parameters are frozen unless `trainable`. `prefix` is prepended to parameter names when
// looking them up in the file. Shape mismatches and, when `strict`, missing or unexpected names
// throw WickError (Data) naming them.
LoadReport load_parameters(Module& module, const SafetensorsFile& file, bool strict = true, bool trainable = false,
                           const std::string& prefix = "");
// Writes every parameter (or only trainable ones) to a safetensors file with metadata.
void save_parameters(const Module& module, const std::string& path, bool trainable_only = false,
                     const std::map<std::string, std::string>& metadata = {});

}  // namespace wick
