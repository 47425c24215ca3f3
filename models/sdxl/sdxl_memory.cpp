#include "models/sdxl/sdxl_memory.h"

namespace wick::sdxl {

ActivationProfile sdxl_activation_profile(const UnetConfig&, const ActivationShape&, bool checkpointing,
                                          const LayerTrainingOf&) {
  ActivationProfile profile;
  profile.checkpointing = checkpointing;
  return profile;
}

}  // namespace wick::sdxl
