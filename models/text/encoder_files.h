// The CLIP and T5 files of a prompt encoder given one by one (text::TextEncoderFiles) as the parts an
// architecture's PromptSpec lists (models/text/prompt_encoder.h): the part names the command line spells
// --clip-l, --clip-g, --t5, --clip-vocab, --clip-g-vocab, --t5-tokenizer.
//
//   text::PromptSpec spec{.parts = text::encoder_parts({"clip_l", "t5", "clip_vocab", "t5_tokenizer"})};
//   text::TextEncoderFiles files = text::encoder_files(request);   // request.files by part name
#pragma once

#include <string>
#include <vector>

#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::text {

// The parts named (each one of clip_l, clip_g, t5, clip_vocab, clip_g_vocab, t5_tokenizer), in that order, with
// their help lines. An unknown name is a WickError (Usage).
std::vector<PromptPart> encoder_parts(const std::vector<std::string>& names);
// request.files as TextEncoderFiles (parts not given stay "").
TextEncoderFiles encoder_files(const PromptEncoderRequest& request);

}  // namespace wick::text
