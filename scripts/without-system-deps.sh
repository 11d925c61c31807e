#!/usr/bin/env bash
# Run a command as a fresh machine would, without the system packages scripts/install-system-deps.sh installs:
#   scripts/without-system-deps.sh .venv/bin/pytest -q
# CI uses it to check that the README's test command passes before those packages exist (tests that need one skip
# with a reason naming it). On a machine that has them, the command runs in a private mount namespace where
# their libraries, programs and Vulkan driver manifests read as empty files and the dynamic loader's cache no
# longer lists them; nothing outside the command is touched. Needs root and `unshare` for that; otherwise (or
# when none is installed) it runs the command as it is and says so.
set -euo pipefail

# Keep in step with install-system-deps.sh (tests/test_readme.py checks that both name the same packages).
PACKAGES=(libosmesa6 gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm cmake libavdevice59 mesa-vulkan-drivers)

installed=()
for pkg in "${PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then installed+=("$pkg"); fi
done
if [ ${#installed[@]} -eq 0 ]; then
  echo "without-system-deps: none of ${PACKAGES[*]} is installed; running as is" >&2
  exec "$@"
fi
if [ "$(id -u)" != "0" ] || ! unshare --mount true 2>/dev/null; then
  echo "without-system-deps: warning: cannot hide ${installed[*]} (needs root and unshare); running with them" >&2
  exec "$@"
fi
echo "without-system-deps: hiding ${installed[*]}" >&2
# shellcheck disable=SC2016  # expanded by the inner shell
exec unshare --mount --propagation private bash -c '
  set -euo pipefail
  hidden=0
  for pkg in "$@"; do
    [ "$pkg" = "--" ] && break
    while IFS= read -r f; do
      case "$f" in
        *.so|*.so.*|/usr/bin/*|/usr/share/vulkan/icd.d/*) ;;
        *) continue ;;
      esac
      if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; hidden=$((hidden + 1)); fi
    done < <(dpkg -L "$pkg")
  done
  cache=$(mktemp)
  ldconfig -C "$cache" 2>/dev/null || true
  mount --bind "$cache" /etc/ld.so.cache
  echo "without-system-deps: $hidden files hidden" >&2
  while [ "$1" != "--" ]; do shift; done
  shift
  exec "$@"
' bash "${installed[@]}" -- "$@"
