#!/usr/bin/env bash
# `wick dataset encode` end to end on the CPU (docs/dataset.md "Encoding a folder"): a folder of Debian's real
# photographs (python-matplotlib-data's grace_hopper.jpg, xplanet-images' earth, night and sun) and committed test
# images (tests/data/images: EXIF-rotated JPEG, RGBA PNG, lossy WebP, a JPEG whose pixel data is cut short, random
# bytes named .jpg) with caption files, through the tiny Flux-shaped VAE (tests/data/vae/flux_tiny, downscale 2) and
# the tiny CLIP-L / T5 (tests/data/clip_text, tests/data/t5), T5 length 16.
#   dataset_encode_test.sh cli WICK CHECK DATA_DIR WORK_DIR
#     the file validates (wick dataset inspect) and holds the expected samples: bucket, source, original size,
#     crop, flip and caption of each id (trigger word, default caption, .caption fallback, CRLF lines), the root
#     attributes, the sample prompts of a training config; its latents and embeddings equal the VAE's and the
#     text encoders' outputs recomputed one sample at a time (CHECK recompute); both bad images are named and
#     counted and nothing is left behind; --latents mean stores no logvar; SDXL and SD3 files validate with their
#     text attributes; exit statuses of bad input; a run
#     killed with kill -9 and started again has the same contents as an uninterrupted run (CHECK same), and an
#     interrupted run refuses other options.
#   dataset_encode_test.sh mpi MPIEXEC WICK CHECK DATA_DIR WORK_DIR
#     mpirun -np 2 gives the same contents as one rank; a failure on rank 0 while rank 1 waits ends both, no hang.
# Skips (77) when the Debian photographs are missing (scripts/install_deps.sh --tests installs them).
set -u
part=$1
shift
mpiexec=""
if [ "$part" = mpi ]; then mpiexec=$1; shift; fi
wick=$1 check=$2 data=$3 work=$4
started=$(date +%s.%N)
photos=(/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg /usr/share/xplanet/images/earth.jpg
        /usr/share/xplanet/images/night.jpg /usr/share/xplanet/images/sun.jpg)
for photo in "${photos[@]}"; do
  if [ ! -f "$photo" ]; then
    echo "skipped: $photo is missing (scripts/install_deps.sh --tests installs python-matplotlib-data and xplanet-images)"
    exit 77
  fi
done
rm -rf "$work" && mkdir -p "$work/photos/sub"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The folder: 4 photographs, 4 good test images in sub/, 2 bad ones.
cp "${photos[@]}" "$work/photos/"
for f in orientation_6.jpg rgb.jpg rgba.png lossy.webp truncated.jpg garbage.jpg; do
  cp "$data/images/$f" "$work/photos/sub/"
done
echo "grace hopper at her desk" >"$work/photos/grace_hopper.txt"
echo "the earth, [trigger]" >"$work/photos/earth.txt"
printf 'the sun\r\nin x-rays\r\n' >"$work/photos/sun.caption"        # kohya's extension, CRLF lines joined
printf '\xef\xbb\xbfa test card, ohwx\n' >"$work/photos/sub/rgb.txt"  # BOM; holds the trigger: nothing prepended
cat >"$work/train.yaml" <<YAML
name: photos
trigger_word: ohwx
model: {arch: flux, name_or_path: $work/flux.safetensors}
dataset: {path: $work/out.h5}
sample: {every: 100, prompts: ["[trigger] on the moon", "a plain test card"]}
YAML
vae=(--vae "$data/vae/flux_tiny")
clip=(--clip-l "$data/clip_text/clip_l/model.safetensors" --clip-vocab "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz")
text=("${clip[@]}" --t5 "$data/t5/t5xxl_comfy.safetensors" --t5-tokenizer "$data/t5/spiece.model" --t5-length 16)
models=(--model flux "${vae[@]}" "${text[@]}")
small=(--resolution 64 --bucket-step 16 --flip --default-caption "a photo of [trigger]" --config "$work/train.yaml")

encode() {  # encode LOG ARGS...: expects status 0
  local log=$1
  shift
  "$wick" dataset encode "$work/photos" "${models[@]}" --no-progress "$@" >"$log" 2>&1 ||
    { fail "wick dataset encode $* exited $?"; tail -5 "$log"; return 1; }
}
expect() {  # expect STATUS PATTERN ARGS...: wick's status and a line of its output
  local want=$1 pattern=$2 out status
  shift 2
  out=$("$wick" "$@" 2>&1)
  status=$?
  if [ $status -ne "$want" ]; then
    fail "wick $* exited $status, expected $want"; echo "$out" | tail -3
  elif ! grep -qF -- "$pattern" <<<"$out"; then
    fail "wick $*: output lacks '$pattern'"; echo "$out" | tail -3
  else
    echo "ok: exit $status: $(grep -F -- "$pattern" <<<"$out" | head -1 | cut -c1-150)"
  fi
}
# kill_when KIND N LOG OUT ARGS...: starts an encode into OUT (at the lowest priority, so that this script's polling
# keeps up on a busy machine) and kills it with SIGKILL once N chunk files of KIND (latents: the VAE's, text: the
# text encoders') are committed. Returns 1 when the run ended on its own first.
kill_when() {
  local kind=$1 n=$2 log=$3 out=$4 pid
  shift 4
  nice -n 19 "$wick" dataset encode "$work/photos" "${models[@]}" --no-progress --out "$out" "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 10000); do
    [ "$(ls "$out.partial" 2>/dev/null | grep -c "^chunk_.*\.$kind\.safetensors$")" -ge "$n" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.002
  done
  kill -9 $pid 2>/dev/null || { wait $pid 2>/dev/null; echo "the run ended before it could be killed"; return 1; }
  wait $pid 2>/dev/null
  echo "killed with $(ls "$out.partial" | grep -c '^chunk_.*\.latents\.safetensors$') latents and" \
    "$(ls "$out.partial" | grep -c '^chunk_.*\.text\.safetensors$') text chunk files committed"
}

if [ "$part" = cli ]; then
  # (a) The straight run: 10 images, 2 bad, --flip: 16 samples; chunks of 3.
  encode "$work/a.log" "${small[@]}" --chunk-size 3 --out "$work/a.h5"
  grep -F "wrote $work/a.h5: 16 samples from 10 images (2 skipped) in 2 buckets (latent height x width): 24x40 (6) 32x32 (10)" "$work/a.log" ||
    fail "the summary line is not as expected"
  grep -q "2 images skipped:" "$work/a.log" || fail "no count of skipped images"
  grep -q "sub/garbage.jpg: not a readable JPEG" "$work/a.log" || fail "garbage.jpg (refused by its header) is not named"
  grep -q "sub/truncated.jpg: truncated JPEG" "$work/a.log" || fail "truncated.jpg (cut pixel data) is not named"
  [ ! -e "$work/a.h5.partial" ] || fail "the work folder $work/a.h5.partial was left behind"
  "$wick" dataset inspect "$work/a.h5" >"$work/a.inspect" 2>&1 || { fail "inspect says the file is invalid"; cat "$work/a.inspect"; }
  for line in "model_family      flux" "latent_channels   16" "vae scaling/shift 0.3611 / 0.1159" \
              "text/embeds from  t5-xxl" "text/pooled from  clip-l" "text_max_length   16" "text              L=16 D=32 pooled P=16" \
              "latents           the VAE's mean, with latents_logvar" "per sample        original_size, crop, flipped, source" \
              "sample prompts    2, embeds [2, 16, 32]" "\"ohwx on the moon\"" "validation        OK (16 samples, all finite)"; do
    grep -qF -- "$line" "$work/a.inspect" || fail "inspect lacks '$line'"
  done
  # Every sample: id bucket(latent) source original(h x w) crop(top,left) flip | caption. Buckets at resolution 64,
  # step 16 (pixels): earth/night 2:1 and sun 2:1 -> 48x80 (cover 48x96, crop left 8; mirrored: 16 - 8 = 8);
  # grace hopper 600x512 -> 64x64 (cover 75x64, crop top 5); the 48x64 test images -> 64x64 (cover 64x85, crop
  # left 10; mirrored 21 - 10 = 11); orientation_6 is stored 32x24 and shown 24x32 after its EXIF rotation.
  cat >"$work/a.expected" <<'LIST'
0 24x40 earth.jpg 1024x2048 crop 0,8 flip 0 | the earth, ohwx
1 24x40 earth.jpg 1024x2048 crop 0,8 flip 1 | the earth, ohwx
2 32x32 grace_hopper.jpg 600x512 crop 5,0 flip 0 | ohwx grace hopper at her desk
3 32x32 grace_hopper.jpg 600x512 crop 5,0 flip 1 | ohwx grace hopper at her desk
4 24x40 night.jpg 1024x2048 crop 0,8 flip 0 | a photo of ohwx
5 24x40 night.jpg 1024x2048 crop 0,8 flip 1 | a photo of ohwx
6 32x32 sub/lossy.webp 48x64 crop 0,10 flip 0 | a photo of ohwx
7 32x32 sub/lossy.webp 48x64 crop 0,11 flip 1 | a photo of ohwx
8 32x32 sub/orientation_6.jpg 24x32 crop 0,10 flip 0 | a photo of ohwx
9 32x32 sub/orientation_6.jpg 24x32 crop 0,11 flip 1 | a photo of ohwx
10 32x32 sub/rgb.jpg 48x64 crop 0,10 flip 0 | a test card, ohwx
11 32x32 sub/rgb.jpg 48x64 crop 0,11 flip 1 | a test card, ohwx
12 32x32 sub/rgba.png 48x64 crop 0,10 flip 0 | a photo of ohwx
13 32x32 sub/rgba.png 48x64 crop 0,11 flip 1 | a photo of ohwx
14 24x40 sun.jpg 512x1024 crop 0,8 flip 0 | ohwx the sun in x-rays
15 24x40 sun.jpg 512x1024 crop 0,8 flip 1 | ohwx the sun in x-rays
LIST
  "$check" list "$work/a.h5" >"$work/a.list" || fail "check list failed"
  diff "$work/a.expected" "$work/a.list" || fail "the samples are not the expected ones (diff above: expected < > file)"
  "$check" recompute "$work/a.h5" "$work/photos" "$data/vae/flux_tiny" "$data/clip_text/clip_l/model.safetensors" \
    "$data/t5/t5xxl_comfy.safetensors" "$data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz" "$data/t5/spiece.model" \
    16 64 16 || fail "the latents or embeddings differ from the VAE's and the text encoders' own outputs"

  # (b) --latents mean: no latents_logvar, the same means.
  encode "$work/mean.log" "${small[@]}" --chunk-size 3 --latents mean --out "$work/mean.h5"
  "$wick" dataset inspect "$work/mean.h5" | grep -q "latents           as stored" || fail "--latents mean stored a logvar"

  # (b2) SDXL (the tiny SDXL VAE: 4 channels, downscale 4; CLIP-L + bigG) and SD3 (the 16-channel tiny VAE, CLIP-L
  # unprojected + bigG + T5): the files validate and carry each model's text attributes.
  "$wick" dataset encode "$work/photos" --model sdxl --vae "$data/vae/sdxl_tiny" "${clip[@]}" \
    --clip-g "$data/clip_text/clip_g/model.safetensors" --resolution 64 --bucket-step 16 --no-progress \
    --out "$work/sdxl.h5" >"$work/sdxl.log" 2>&1 || { fail "the sdxl encode exited $?"; tail -3 "$work/sdxl.log"; }
  "$wick" dataset encode "$work/photos" --model sd3 "${vae[@]}" "${clip[@]}" --clip-l-pooled unprojected --allow-empty-captions --max-image-pixels 1000000 \
    --clip-g "$data/clip_text/clip_g/model.safetensors" --t5 "$data/prompts/sd3_t5" --t5-tokenizer "$data/t5/spiece.model" \
    --t5-length 8 --resolution 64 --bucket-step 16 --no-progress --out "$work/sd3.h5" >"$work/sd3.log" 2>&1 ||
    { fail "the sd3 encode exited $?"; tail -3 "$work/sd3.log"; }
  # Neither run has a default caption or a trigger word: 5 of the 9 images whose header reads have no caption file
  # (truncated.jpg among them; its pixels fail later). The SDXL run says so, counted and named; the SD3 run passed
  # --allow-empty-captions and stays quiet about it.
  grep -qF "warning: 5 of 9 images found have no caption (no .txt or fallback caption file, or a blank one) and are encoded with an empty caption (night.jpg, sub/lossy.webp, sub/orientation_6.jpg, ...)" \
    "$work/sdxl.log" || fail "the sdxl encode did not warn about and count the images without a caption"
  grep -q "have no caption" "$work/sd3.log" && fail "--allow-empty-captions did not silence the warning"
  # --max-image-pixels 1000000: the 1024x2048 photographs are skipped by their header, named with the limit.
  grep -qF "earth.jpg: jpeg is 2048 x 1024 = 2097152 pixels, over the limit of 1000000" "$work/sd3.log" ||
    fail "--max-image-pixels did not skip earth.jpg naming the limit"
  for model in sdxl sd3; do
    "$wick" dataset inspect "$work/$model.h5" >"$work/$model.inspect" 2>&1 || fail "the $model file does not validate"
    grep -q "model_family      $model" "$work/$model.inspect" || fail "the $model file's model_family"
  done
  grep -qF "latent_channels   4" "$work/sdxl.inspect" && grep -qF "text/pooled from  clip-g projected" "$work/sdxl.inspect" &&
    grep -qF "text_max_length   77" "$work/sdxl.inspect" || fail "the sdxl attributes (4 channels, clip-g projected, 77)"
  grep -qF "text_max_length   8" "$work/sd3.inspect" && grep -qF "L=85" "$work/sd3.inspect" ||
    fail "the sd3 attributes (T5 8: 77 + 8 tokens)"

  # (c) Bad input: exit statuses 2 (command line, options, an existing file) and 3 (data).
  expect 2 "exists (pass --force to replace it)" dataset encode "$work/photos" "${models[@]}" "${small[@]}" --out "$work/a.h5"
  expect 3 "not a folder" dataset encode "$work/nowhere" "${models[@]}" --out "$work/x.h5"
  expect 2 "--model: sd4 not in {flux,sd3,sdxl,zimage,qwenimage}" dataset encode "$work/photos" --model sd4 "${vae[@]}" "${text[@]}" \
    --out "$work/x.h5"
  expect 2 "is not a multiple of the model's divisor 4" dataset encode "$work/photos" "${models[@]}" --bucket-step 6 \
    --out "$work/x.h5"
  expect 2 "--center-crop excludes --random-crop" dataset encode "$work/photos" "${models[@]}" --center-crop \
    --random-crop --out "$work/x.h5"
  expect 3 "the VAE makes 16-channel latents, sdxl takes 4" dataset encode "$work/photos" --model sdxl "${vae[@]}" \
    "${clip[@]}" --clip-g "$data/clip_text/clip_g/model.safetensors" --out "$work/x.h5"
  mkdir -p "$work/empty"
  expect 3 "no readable image in $work/empty" dataset encode "$work/empty" "${models[@]}" --out "$work/x.h5"
  [ ! -e "$work/x.h5" ] || fail "a failed run left $work/x.h5"

  # (d) kill -9 and resume: at resolution 128 in chunks of one image (9 chunks), killed once 3 chunks are through
  # the VAE; a restart with other options is refused (2); one with the same options is killed again once 2 chunks
  # are through the text encoders; the third run finishes, equal to a straight run.
  big=(--resolution 128 --bucket-step 16 --flip --chunk-size 1)
  # The text encoders take about 10 ms a chunk here: when a run gets to its end before the script sees the
  # files it waits for (a very busy machine), the scenario starts again, up to 3 times.
  encode "$work/straight.log" "${big[@]}" --out "$work/straight.h5"
  for attempt in 1 2 3; do
    rm -rf "$work/killed.h5" "$work/killed.h5.partial"
    kill_when latents 3 "$work/killed.log" "$work/killed.h5" "${big[@]}" || continue
    [ ! -e "$work/killed.h5" ] || fail "the killed run wrote its file"
    expect 2 "resolution was 128, now 96" dataset encode "$work/photos" "${models[@]}" --resolution 96 \
      --bucket-step 16 --flip --chunk-size 1 --out "$work/killed.h5"
    kill_when text 1 "$work/killed2.log" "$work/killed.h5" "${big[@]}" || continue
    grep -E "resuming \([3-9] through the VAE and 0 through the text encoders before\)" "$work/killed2.log" ||
      fail "the second run did not resume the VAE's work"
    encode "$work/resumed.log" "${big[@]}" --out "$work/killed.h5"
    grep -E "resuming \(9 through the VAE and [1-8] through the text encoders before\)" "$work/resumed.log" ||
      fail "the third run did not resume the text encoders' work"
    "$check" same "$work/straight.h5" "$work/killed.h5" || fail "killed + resumed differs from the straight run"
    break
  done
  [ "$attempt" -lt 3 ] || [ -e "$work/resumed.log" ] || fail "no run could be killed in time in 3 attempts"
fi

if [ "$part" = mpi ]; then
  # (e) Two ranks against one, chunks of 2 (5 chunks: ranks 0 and 1 take 3 and 2).
  encode "$work/one.log" "${small[@]}" --chunk-size 2 --out "$work/one.h5"
  timeout 120 "$mpiexec" --oversubscribe -np 2 "$wick" dataset encode "$work/photos" "${models[@]}" --no-progress \
    "${small[@]}" --chunk-size 2 --out "$work/two.h5" >"$work/two.log" 2>&1 ||
    { fail "mpirun -np 2 wick dataset encode exited $?"; tail -5 "$work/two.log"; }
  grep -q "2 ranks" "$work/two.log" || fail "the 2-rank run does not say it ran on 2 ranks"
  [ "$(grep -c "^wrote " "$work/two.log")" = 1 ] || fail "not exactly one rank reported the file"
  "$check" same "$work/one.h5" "$work/two.h5" || fail "2 ranks made other contents than 1 rank"
  # (f) Rank 0 refuses a work folder made with other options while rank 1 waits for it at a barrier: both end,
  # with rank 0's status 2, well within the timeout.
  mkdir -p "$work/stale.h5.partial"
  python3 - "$work/stale.h5.partial" <<'PY'
import json, struct, sys
def write(path, metadata):
    header = json.dumps({"__metadata__": metadata}).encode()
    header += b" " * (-len(header) % 8)
    open(path, "wb").write(struct.pack("<Q", len(header)) + header)
write(sys.argv[1] + "/plan.safetensors", {"wick_encode_plan": json.dumps({"version": 1, "model": "sdxl"})})
write(sys.argv[1] + "/chunk_000000.latents.safetensors", {})
PY
  begin=$(date +%s)
  timeout 60 "$mpiexec" --oversubscribe -np 2 "$wick" dataset encode "$work/photos" "${models[@]}" --no-progress \
    "${small[@]}" --out "$work/stale.h5" >"$work/stale.log" 2>&1
  status=$?
  echo "2 ranks with a stale work folder: exit $status after $(( $(date +%s) - begin )) s"
  [ $status -eq 2 ] || { fail "expected exit 2 (rank 0's), got $status"; tail -5 "$work/stale.log"; }
  grep "rank 0 of 2.*holds an interrupted run with other options or images" "$work/stale.log" | grep -qF \
    'model was "sdxl", now "flux"' || { fail "rank 0's error is not shown"; tail -5 "$work/stale.log"; }
  [ $(( $(date +%s) - begin )) -lt 30 ] || fail "the job took $(( $(date +%s) - begin )) s to end"
fi

echo "dataset_encode_test.sh $part: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
  "$started" "$(date +%s.%N)") s, $failures failures"
exit $((failures > 0))
