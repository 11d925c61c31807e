#!/usr/bin/env bash
# The system packages the full test suite uses, on Debian/Ubuntu (run as root, or it uses sudo):
#   libosmesa6                     MuJoCo's CPU renderer (camera tests, the simulated arm's cameras)
#   gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm, cmake
#                                  the Cortex-M cross compiler and emulator for the C export checks
#   libavdevice59                  FFmpeg's libraries for LeRobot's video loader
#   mesa-vulkan-drivers (Mesa 25, bookworm-backports on Debian 12)
#                                  lavapipe, the CPU Vulkan device ManiSkill/SAPIEN needs
# Each group is optional: when one fails to install, only the tests that need it skip (their reason names the
# package). Without any of them the suite still passes on a fresh machine.
set -uo pipefail
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: no apt-get here; install the packages above with your system's package manager" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-system-deps: needs root (or sudo) to install packages" >&2; exit 1
  fi
fi
if grep -qs bookworm /etc/os-release && [ ! -f /etc/apt/sources.list.d/backports.sources ]; then
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    | $SUDO tee /etc/apt/sources.list.d/backports.sources >/dev/null
fi
$SUDO apt-get update -qq || echo "warning: apt-get update failed"
$SUDO apt-get install -y -qq libosmesa6 >/dev/null || echo "warning: no libosmesa6; MuJoCo rendering tests skip"
$SUDO apt-get install -y -qq gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm cmake >/dev/null \
  || echo "warning: no arm-none-eabi toolchain/QEMU; Cortex-M export checks skip"
$SUDO apt-get install -y -qq libavdevice59 >/dev/null || echo "warning: no FFmpeg libs; LeRobot video loader check skips"
if grep -qs bookworm /etc/os-release; then
  $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers >/dev/null \
    || echo "warning: no lavapipe from bookworm-backports; ManiSkill tests skip"
else
  $SUDO apt-get install -y -qq mesa-vulkan-drivers >/dev/null || echo "warning: no mesa-vulkan-drivers; ManiSkill tests skip"
fi
exit 0
