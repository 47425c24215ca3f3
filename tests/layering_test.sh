#!/usr/bin/env bash
# The layers point one way (DESIGN.md "Layers"): runtime/ includes nothing above it, comm/ only
# runtime/, engine/ no models/ or launch/ header, models/ no launch/ header. Prints every include
# that breaks the rule and exits 1 when there is one.
#   tests/layering_test.sh [SOURCE_DIR]
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
status=0
check() {  # check LAYER FORBIDDEN_PREFIX...
  local layer=$1 pattern
  shift
  pattern=$(printf '%s\\|' "$@")
  pattern=${pattern%\\|}
  local hits
  hits=$(grep -rn --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
           "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]\\($pattern\\)/" "$layer" || true)
  if [ -n "$hits" ]; then
    echo "FAIL: $layer/ includes a layer above it:"
    echo "$hits"
    status=1
  else
    echo "ok: $layer/ includes nothing from $*"
  fi
}
check runtime comm engine models launch
check comm engine models launch
check engine models launch
check models launch
exit $status
