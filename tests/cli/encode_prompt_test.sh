#!/usr/bin/env bash
# `wick encode-prompt` on the tiny fixtures (tests/data/prompts, clip_text, t5, clip_tokenizer), given as ComfyUI-style
# files: the written file's context, pooled vector, token ids, mask and metadata against diffusers' encode_prompt
# (check_encode_prompt.py, python3 standard library), and the exit statuses of bad input (2 command line, 3 files).
# Usage: encode_prompt_test.sh WICK_BINARY DATA_DIR WORK_DIR
set -u
wick=$1 data=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
check="python3 $here/check_encode_prompt.py"
cases="$data/prompts/encode_prompt_cases.safetensors"
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

prompts=()
while IFS= read -r -d '' p; do prompts+=(--prompt "$p"); done < <($check prompts "$cases")
[ ${#prompts[@]} -eq 8 ] || fail "expected 4 prompts in $cases"

clip_l="$data/clip_text/clip_l/model.safetensors" clip_g="$data/clip_text/clip_g/model.safetensors"
vocab="$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" spiece="$data/t5/spiece.model"

encode() {  # encode NAME ARGS...: runs wick, expects status 0 and the summary lines
  local name=$1 out
  shift
  out=$("$wick" encode-prompt "$@" "${prompts[@]}" --out "$work/$name.safetensors" 2>&1)
  local status=$?
  if [ $status -ne 0 ]; then fail "encode-prompt $name exited $status"; echo "$out"; return 1; fi
  grep -q "^context  \[4, " <<<"$out" || fail "$name: no context shape printed"
  grep -q "wrote $work/$name.safetensors in" <<<"$out" || fail "$name: no timing printed"
  echo "$out" | sed 's/^/  /'
}
verify() {  # verify NAME CHECK_ARGS...
  local name=$1
  shift
  $check check "$work/$name.safetensors" "$cases" "$@" || fail "$name: the file differs from diffusers' (above)"
}

encode flux --model flux --clip-l "$clip_l" --t5 "$data/t5/t5xxl_comfy.safetensors" --clip-vocab "$vocab" \
  --t5-tokenizer "$spiece" --t5-length 256 --batch-size 3 &&
  verify flux flux_schnell.prompt_embeds flux_schnell.pooled_prompt_embeds --tokens clip_l_ids=clip_l.ids \
    --tokens t5_ids=t5.ids.256 --meta model=flux --meta max_length=256 --meta embeds_encoder=t5-xxl \
    --meta pooled_encoder=clip-l --meta clip_l_pad_id=49407 --meta t5_pad_id=0 --meta dtype=f32

encode sd3 --model sd3 --clip-l "$clip_l" --clip-g "$clip_g" --t5 "$data/prompts/sd3_t5" --clip-vocab "$vocab" \
  --t5-tokenizer "$data/t5" --clip-l-pooled unprojected &&
  verify sd3 sd3.prompt_embeds sd3.pooled_unprojected --tokens clip_l_ids=clip_l.ids --tokens clip_g_ids=clip_g.ids \
    --tokens t5_ids=t5.ids.256 --meta model=sd3 --meta clip_l_pooled=unprojected --meta max_length=256 \
    --meta clip_g_pad_id=0

encode sdxl --model sdxl --clip-l "$clip_l" --clip-g "$clip_g" --clip-vocab "$vocab" --zeros-for-empty-prompt &&
  verify sdxl sdxl.prompt_embeds sdxl.pooled_prompt_embeds --zero-rows 1 --tokens clip_l_ids=clip_l.ids \
    --tokens clip_g_ids=clip_g.ids --meta model=sdxl --meta zeros_for_empty_prompt=true --meta max_length=77

# The same prompts as --prompt=VALUE (the empty one as "--prompt="; CLI11 2.1.2 alone would take the next argument
# as its value, encoding "--prompt=..." text and dropping a prompt): the same file.
equals=()
for ((i = 1; i < ${#prompts[@]}; i += 2)); do equals+=("--prompt=${prompts[i]}"); done
grep -qx -- "--prompt=" < <(printf '%s\n' "${equals[@]}") || fail "no empty prompt among the cases"
out=$("$wick" encode-prompt --model sdxl --clip-l "$clip_l" --clip-g "$clip_g" --clip-vocab "$vocab" \
  --zeros-for-empty-prompt "${equals[@]}" --out "$work/sdxl_equals.safetensors" 2>&1) ||
  { fail "encode-prompt with --prompt=VALUE exited $?"; echo "$out"; }
verify sdxl_equals sdxl.prompt_embeds sdxl.pooled_prompt_embeds --zero-rows 1 --tokens clip_l_ids=clip_l.ids \
  --tokens clip_g_ids=clip_g.ids --meta model=sdxl --meta zeros_for_empty_prompt=true --meta max_length=77

expect() {  # expect STATUS PATTERN ARGS...
  local want=$1 pattern=$2 out status
  shift 2
  out=$("$wick" encode-prompt "$@" --out "$work/bad.safetensors" 2>&1)
  status=$?
  if [ $status -ne "$want" ]; then
    fail "encode-prompt $* exited $status, expected $want"; echo "$out"
  elif ! grep -qF -- "$pattern" <<<"$out"; then
    fail "encode-prompt $*: output lacks '$pattern'"; echo "$out"
  else
    echo "ok: exit $status: $(grep -F -- "$pattern" <<<"$out" | head -1)"
  fi
}
flux=(--model flux --clip-l "$clip_l" --t5 "$data/t5/t5xxl_comfy.safetensors" --clip-vocab "$vocab" --prompt cat)
expect 3 "$work/missing/spiece.model" "${flux[@]}" --t5-tokenizer "$work/missing/spiece.model"
expect 3 "$data/t5/t5xxl_comfy.safetensors" --model flux --clip-l "$data/t5/t5xxl_comfy.safetensors" \
  --t5 "$data/t5/t5xxl_comfy.safetensors" --clip-vocab "$vocab" --t5-tokenizer "$spiece" --prompt cat
expect 3 "$clip_l has no text_projection.weight" --model sdxl --clip-l "$clip_l" --clip-g "$clip_l" \
  --clip-vocab "$vocab" --prompt cat
expect 3 "has no text_projection.weight, so CLIP-L's pooled vector cannot be projected" --model sd3 --clip-l "$clip_l" \
  --clip-g "$clip_g" --t5 "$data/prompts/sd3_t5" --clip-vocab "$vocab" --t5-tokenizer "$spiece" --prompt cat
expect 3 "$work/no_pipeline is not a folder" --model flux --path "$work/no_pipeline" --prompt cat
expect 2 "the CLIP vocabulary (clip_vocab) is not given" --model sdxl --clip-l "$clip_l" --clip-g "$clip_g" --prompt cat
expect 2 "--path excludes --clip-l" --model flux --path "$work" --clip-l "$clip_l" --prompt cat
expect 2 "sdxl takes no --t5-length" --model sdxl --clip-l "$clip_l" --clip-g "$clip_g" --clip-vocab "$vocab" --t5-length 77 \
  --prompt cat
expect 2 "sdxl's text encoders take no --t5" --model sdxl --clip-l "$clip_l" --clip-g "$clip_g" --clip-vocab "$vocab" \
  --t5 "$clip_l" --prompt cat
expect 2 "--clip-l-pooled: 'sideways' is not one of projected, unprojected" --model sd3 --path "$work" \
  --clip-l-pooled sideways --prompt cat
expect 2 "--t5-length: 0 is not in [1, 4096]" --model flux --path "$work" --t5-length 0 --prompt cat
expect 2 "flux text encoders: give a diffusers pipeline folder (--path) or the encoder files" --model flux --prompt cat
expect 2 "--prompt is required" --model flux --path "$work"
expect 2 "flux" --model sd4 --path "$work" --prompt cat
[ ! -e "$work/bad.safetensors" ] || fail "a failed run left $work/bad.safetensors"
exit $((failures > 0))
