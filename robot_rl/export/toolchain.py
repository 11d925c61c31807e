"""Compilers around the generated C: host build + run for verification, ARM cross builds for sizes.

- :func:`build_host_harness` compiles the policy with a small driver (``-std=c99 -pedantic -Werror``) that
  reads observations from a binary file and writes actions, or times ``reps`` passes (``--bench``);
  :func:`build_vision_harness` compiles a size-checked policy (pixel, or ``int8_full``) as a shared library
  and calls it through ctypes (so tests can also pass it wrong sizes).
- :func:`cross_compile` builds the policy for a Cortex-M target with ``arm-none-eabi-gcc -Os`` and reports
  flash and RAM: the policy's own sections (``.text``, ``.rodata``, ``.data``, ``.bss``) plus what linking
  it into a minimal newlib-nano image adds (libm's ``expf``/``tanhf``…), the peak stack from GCC's
  call graph (``-fcallgraph-info=su``), and which functions call float routines (:func:`float_calls`:
  on the FPU-less Cortex-M0+ every float operation is a soft-float call).
- :func:`qemu_cost` builds ``examples/firmware`` around the policy and counts the instructions of one forward
  pass under ``qemu-system-arm -icount`` (Cortex-M4, M7, and ARMv6-M code for the M0+).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.export.c_codegen import CSources

HOST_CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic")

#: ``arm-none-eabi-gcc`` flags per target (M4F/M7: hard-float ABI, M7 with the single-precision FPv5 FPU;
#: M0+: ARMv6-M (thumbv6m), no FPU, so float arithmetic is libgcc's soft-float routines).
CORTEX_TARGETS: dict[str, tuple[str, ...]] = {
    "cortex-m4f": ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"),
    "cortex-m7": ("-mcpu=cortex-m7", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"),
    "cortex-m0plus": ("-mcpu=cortex-m0plus", "-mfloat-abi=soft"),
}
ARM_GCC = "arm-none-eabi-gcc"


class ToolchainError(RuntimeError):
    """A compiler is missing or rejected the generated code (the message holds its output)."""


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def host_compiler() -> str:
    """The host C compiler (``$CC``-free: gcc, then cc, then clang); ToolchainError if none."""
    for cc in ("gcc", "cc", "clang"):
        if shutil.which(cc):
            return cc
    raise ToolchainError("no host C compiler (gcc, cc or clang) on PATH; install gcc to verify the C export")


def write_sources(src: CSources, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<name>.h`` and ``<name>.c`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    h, c = out_dir / f"{src.name}.h", out_dir / f"{src.name}.c"
    h.write_text(src.header)
    c.write_text(src.source)
    return h, c


def _harness(name: str) -> str:
    up = name.upper()
    return f"""#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "{name}.h"

/* verify: harness obs.bin act.bin N ; bench: harness --bench obs.bin N reps (prints ns per forward) */
int main(int argc, char **argv)
{{
    int bench = argc == 5 && strcmp(argv[1], "--bench") == 0;
    const char *obs_path = argv[bench ? 2 : 1];
    long n = atol(argv[3]), k, r, reps = bench ? atol(argv[4]) : 1;
    float *obs, *act;
    FILE *f;
    if (argc != (bench ? 5 : 4)) {{ fprintf(stderr, "bad arguments\\n"); return 2; }}
    obs = malloc(sizeof(float) * (size_t)(n * {up}_OBS_DIM));
    act = malloc(sizeof(float) * (size_t)(n * {up}_ACTION_DIM));
    f = fopen(obs_path, "rb");
    if (!obs || !act || !f || fread(obs, sizeof(float), (size_t)(n * {up}_OBS_DIM), f)
        != (size_t)(n * {up}_OBS_DIM)) {{ fprintf(stderr, "cannot read %s\\n", obs_path); return 1; }}
    fclose(f);
    if (bench) {{
        struct timespec t0, t1;
        double sum = 0.0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (r = 0; r < reps; ++r)
            for (k = 0; k < n; ++k) {{
                {name}_forward(obs + k * {up}_OBS_DIM, act);
                sum += act[0];
            }}
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%.3f %g\\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)(n * reps), sum);
        return 0;
    }}
    for (k = 0; k < n; ++k) {{
        {name}_forward(obs + k * {up}_OBS_DIM, act + k * {up}_ACTION_DIM);
    }}
    f = fopen(argv[2], "wb");
    if (!f || fwrite(act, sizeof(float), (size_t)(n * {up}_ACTION_DIM), f) != (size_t)(n * {up}_ACTION_DIM))
        return 1;
    fclose(f);
    return 0;
}}
"""


@dataclass
class HostHarness:
    """A compiled host driver for one generated policy."""

    exe: Path
    obs_dim: int
    act_dim: int

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """Run the C forward on every row of ``obs`` ``[N, obs_dim]`` → ``[N, act_dim]`` float32."""
        obs = np.ascontiguousarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        with tempfile.TemporaryDirectory() as tmp:
            o, a = Path(tmp) / "obs.bin", Path(tmp) / "act.bin"
            obs.tofile(o)
            _run([str(self.exe), str(o), str(a), str(len(obs))])
            return np.fromfile(a, dtype=np.float32).reshape(len(obs), self.act_dim)

    def bench_ns(self, obs: np.ndarray, reps: int) -> float:
        """Mean nanoseconds per forward over ``reps`` passes through ``obs`` (timed inside C)."""
        obs = np.ascontiguousarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        with tempfile.TemporaryDirectory() as tmp:
            o = Path(tmp) / "obs.bin"
            obs.tofile(o)
            out = _run([str(self.exe), "--bench", str(o), str(len(obs)), str(reps)])
        return float(out.split()[0])


def build_host_harness(src: CSources, build_dir: Path, obs_dim: int, act_dim: int,
                       extra_flags: tuple[str, ...] = ()) -> HostHarness:
    """Compile ``src`` with the verification/benchmark driver in ``build_dir``."""
    cc = host_compiler()
    _, c = write_sources(src, build_dir)
    driver = build_dir / f"{src.name}_harness.c"
    driver.write_text(_harness(src.name))
    exe = build_dir / f"{src.name}_harness"
    _run([cc, *HOST_CFLAGS, *extra_flags, "-I", str(build_dir), "-o", str(exe), str(driver), str(c), "-lm"])
    return HostHarness(exe, obs_dim, act_dim)


@dataclass
class VisionHarness:
    """A generated pixel policy (:mod:`robot_rl.export.c_vision`) built as a host shared library, called by ctypes."""

    lib: ctypes.CDLL
    name: str
    image_bytes: list[int]
    """Bytes of each camera's image, in the entry point's order (sorted camera keys)."""
    state_dim: int
    act_dim: int
    io_dtype: type = np.float32
    """Element type of state and action (``np.int16`` for the fixed-point variants, q15 and q7)."""

    def call(self, images: Sequence[np.ndarray | None], state: np.ndarray | None, action: np.ndarray | None,
             sizes: Sequence[int] | None = None) -> int:
        """One raw call of ``<name>_forward``; ``sizes`` overrides the lengths passed (default: the true ones)."""
        fn = getattr(self.lib, f"{self.name}_forward")
        fn.restype = ctypes.c_int
        arrays = [*images, *([state] if self.state_dim else []), action]
        true = [0 if a is None else a.nbytes if i < len(images) else a.size for i, a in enumerate(arrays)]
        lengths = list(sizes) if sizes is not None else true
        args: list[object] = []
        for a, n in zip(arrays, lengths):
            args += [ctypes.c_void_p(a.ctypes.data if a is not None else None), ctypes.c_size_t(n)]
        return int(fn(*args))

    def forward(self, images: Sequence[np.ndarray], state: np.ndarray | None) -> np.ndarray:
        """Each row: ``images`` ``[N, H, W, C]`` uint8 per camera, ``state`` ``[N, D]`` → ``[N, act_dim]``.

        State and action are of :attr:`io_dtype`.
        """
        cams = [np.ascontiguousarray(im, dtype=np.uint8) for im in images]
        for im, nbytes in zip(cams, self.image_bytes):
            if im[0].nbytes != nbytes:
                raise ValueError(f"{self.name}: an image of {list(im.shape[1:])} ({im[0].nbytes} bytes), the policy "
                                 f"takes {nbytes} bytes")
        n = len(cams[0]) if cams else len(state if state is not None else [])
        st: np.ndarray | None = np.ascontiguousarray(state, dtype=self.io_dtype) if self.state_dim else None
        out: np.ndarray = np.empty((n, self.act_dim), self.io_dtype)
        for k in range(n):
            rc = self.call([c[k] for c in cams], st[k] if st is not None else None, out[k])
            if rc != 0:
                raise ToolchainError(f"{self.name}_forward returned {rc} on row {k}")
        return out


def build_vision_harness(src: CSources, build_dir: Path, image_bytes: list[int], state_dim: int,
                         act_dim: int) -> VisionHarness:
    """Compile ``src`` (a size-checked entry point: pixel, int8_full, q15 or q7) into a host shared library, load it."""
    _, c = write_sources(src, build_dir)
    lib = build_dir / f"lib{src.name}.so"
    _run([host_compiler(), *HOST_CFLAGS, "-shared", "-fPIC", "-I", str(build_dir), "-o", str(lib), str(c), "-lm"])
    return VisionHarness(ctypes.CDLL(str(lib)), src.name, image_bytes, state_dim, act_dim,
                         np.int16 if src.variant in ("q15", "q7") else np.float32)


# ---------------------------------------------------------------------------------------------
# Cortex-M cross builds
# ---------------------------------------------------------------------------------------------


@dataclass
class TargetSize:
    """Flash and RAM of one policy on one Cortex-M target (bytes)."""

    target: str
    text: int
    rodata: int
    data: int
    bss: int
    stack: int
    """Peak stack of ``<name>_forward`` over its own call graph (GCC ``-fcallgraph-info=su``)."""
    libm_flash: int
    """Flash that linking the policy into a minimal newlib-nano image adds beyond its own sections
    (``expf``, ``tanhf``, … and their helpers)."""
    external_calls: list[str] = field(default_factory=list)
    """Functions outside the policy it calls (libm); their frames are not in ``stack``."""
    float_calls: dict[str, list[str]] = field(default_factory=dict)
    """Per function of the object, the soft-float and libm float routines it calls (:func:`float_calls`)."""

    @property
    def flash(self) -> int:
        """``.text + .rodata + .data`` (initialised data is stored in flash too) of the policy."""
        return self.text + self.rodata + self.data

    @property
    def ram(self) -> int:
        """``.data + .bss + stack``."""
        return self.data + self.bss + self.stack

    def to_dict(self) -> dict[str, object]:
        """Plain data, with the derived flash/RAM totals."""
        return {**asdict(self), "flash": self.flash, "ram": self.ram}


def arm_available() -> bool:
    """Whether ``arm-none-eabi-gcc`` is on PATH (Debian: ``apt-get install gcc-arm-none-eabi``)."""
    return shutil.which(ARM_GCC) is not None


def _section_sizes(obj: Path) -> dict[str, int]:
    out = _run(["arm-none-eabi-size", "-A", str(obj)])
    sizes = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        sec = parts[0]
        for key in sizes:
            if sec == f".{key}" or sec.startswith(f".{key}."):
                sizes[key] += int(parts[1])
    return sizes


_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def _peak_stack(ci_text: str, root: str) -> tuple[int, list[str]]:
    frames: dict[str, int] = {}
    for title, label in _NODE.findall(ci_text):
        m = re.search(r"(\d+) bytes", label)
        if m:
            frames[title] = int(m.group(1))
    calls: dict[str, list[str]] = {}
    for src, dst in _EDGE.findall(ci_text):
        calls.setdefault(src, []).append(dst)
    external: set[str] = set()

    def peak(fn: str, seen: frozenset[str]) -> int:
        if fn not in frames:
            external.add(fn)
            return 0
        if fn in seen:
            raise ToolchainError(f"recursion through {fn} in the generated code")
        return frames[fn] + max((peak(c, seen | {fn}) for c in calls.get(fn, [])), default=0)

    return peak(root, frozenset()), sorted(external)


_MIN_MAIN = """#include "{name}.h"
volatile float {name}_io[{obs} + {act}];
int main(void)
{{
#ifdef WITH_POLICY
    {name}_forward((const float *){name}_io, (float *){name}_io + {obs});
#endif
    return 0;
}}
"""


def cross_compile(src: CSources, target: str, build_dir: Path, obs_dim: int, act_dim: int,
                  main_source: str | None = None) -> TargetSize:
    """Build ``src`` for ``target`` (a key of :data:`CORTEX_TARGETS`) at ``-Os`` and measure it.

    ``main_source``: the minimal ``main`` that calls the policy under ``WITH_POLICY`` (default: the MLP
    entry point's; pixel policies pass :func:`robot_rl.export.c_vision.size_main`).
    """
    if target not in CORTEX_TARGETS:
        raise ConfigError(f"unknown target {target!r}; valid: {', '.join(CORTEX_TARGETS)}")
    if not arm_available():
        raise ToolchainError(f"{ARM_GCC} is not on PATH (Debian/Ubuntu: apt-get install gcc-arm-none-eabi "
                             "libnewlib-arm-none-eabi)")
    d = build_dir / target
    _, c = write_sources(src, d)
    flags = ["-std=c99", "-Os", "-mthumb", *CORTEX_TARGETS[target], "-ffunction-sections", "-fdata-sections",
             "-Wall", "-Wextra", "-Werror", "-pedantic"]
    obj = d / f"{src.name}.o"
    _run([ARM_GCC, *flags, "-fcallgraph-info=su", "-c", str(c), "-o", str(obj)], cwd=d)
    sizes = _section_sizes(obj)
    ci = d / f"{src.name}.ci"
    stack, external = _peak_stack(ci.read_text(), f"{src.name}_forward") if ci.is_file() else (0, [])

    # The flash libm adds: link a minimal image with and without the call, minus the policy's own sections.
    main = d / "size_main.c"
    main.write_text(main_source or _MIN_MAIN.format(name=src.name, obs=obs_dim, act=act_dim))
    link = [ARM_GCC, *flags, "--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections", "-I", str(d)]
    images = {}
    for tag, extra in (("with", ["-DWITH_POLICY"]), ("without", [])):
        elf = d / f"size_{tag}.elf"
        _run([*link, *extra, "-o", str(elf), str(main), str(c), "-lm"], cwd=d)
        s = _section_sizes(elf)
        images[tag] = s["text"] + s["rodata"] + s["data"]
    own = sizes["text"] + sizes["rodata"] + sizes["data"]
    libm = max(0, images["with"] - images["without"] - own)
    return TargetSize(target, sizes["text"], sizes["rodata"], sizes["data"], sizes["bss"], stack, libm, external,
                      float_calls(obj))


#: libgcc's soft-float routines (``__aeabi_fadd``, ``__aeabi_i2f``, ``__addsf3``, …) and libm's float functions.
_FLOAT_ROUTINE = re.compile(r"^__aeabi_(?:[fd][a-z0-9]+|u?[il]2[fd]|ul2[fd])$|^__(?:add|sub|mul|div|neg)[sd]f3$"
                            r"|^__float\w*[sd]f$|^__fix\w*[sd]f\w*$|^__(?:extend|trunc)\w*[sd]f2$"
                            r"|^__(?:eq|ne|lt|le|gt|ge|un|cmp)[sd]f2$"
                            r"|^(?:exp|expm1|tanh|erf|sqrt|floor|fmin|fmax|log|pow)f?$")


def float_calls(obj: Path) -> dict[str, list[str]]:
    """``{function: [float routines it calls]}`` of an object built with ``-ffunction-sections``.

    Read from its relocations; a static function inlined into its caller counts as the caller.
    """
    listing = _run(["arm-none-eabi-objdump", "-r", str(obj)])
    calls: dict[str, set[str]] = {}
    section = ""
    for line in listing.splitlines():
        m = re.match(r"RELOCATION RECORDS FOR \[\.text\.([^\]]+)\]", line)
        if m or line.startswith("RELOCATION RECORDS FOR"):
            section = m.group(1) if m else ""
            continue
        parts = line.split()
        if section and len(parts) == 3 and _FLOAT_ROUTINE.match(parts[2]):
            calls.setdefault(section, set()).add(parts[2])
    return {fn: sorted(v) for fn, v in sorted(calls.items())}


# ---------------------------------------------------------------------------------------------
# Instructions per forward pass under QEMU (examples/firmware/src/bench_qemu.c)
# ---------------------------------------------------------------------------------------------

#: Firmware board and QEMU machine per target. QEMU has no Cortex-M0+ machine with more than 16 KB of RAM, so the
#: ARMv6-M binary (``-mcpu=cortex-m0plus``, soft float) runs on the AN385's Cortex-M3: v6-M is a subset of v7-M,
#: the same instructions execute, and the count is the M0+'s (its cycles per instruction are not modelled).
QEMU_BOARDS: dict[str, tuple[str, str]] = {"cortex-m4f": ("mps2_an386", "mps2-an386"),
                                          "cortex-m7": ("mps2_an500", "mps2-an500"),
                                          "cortex-m0plus": ("mps2_an385_v6m", "mps2-an385")}
FIRMWARE_DIR = Path(__file__).resolve().parents[2] / "examples" / "firmware"


@dataclass
class QemuCost:
    """One forward pass on an emulated Cortex-M: instructions (``-icount``), painted stack, the action computed."""

    target: str
    board: str
    instructions: int
    stack: int
    action: list[int]
    """The words the firmware printed: float32 bits, or the int16 values of a q15 or q7 policy."""


def qemu_available() -> bool:
    """``arm-none-eabi-gcc``, ``cmake`` and ``qemu-system-arm`` (Debian: gcc-arm-none-eabi cmake qemu-system-arm)."""
    return arm_available() and shutil.which("cmake") is not None and shutil.which("qemu-system-arm") is not None


def qemu_cost(policy_dir: Path, target: str, build_dir: Path, name: str = "policy", checked_api: bool = False,
              reps: int = 20, opt: str = "-Os", timeout: float = 600.0, firmware_dir: Path = FIRMWARE_DIR) -> QemuCost:
    """Build ``examples/firmware``'s ``bench_qemu.c`` around ``policy_dir/<name>.c`` for ``target`` and run it.

    ``checked_api``: the policy has the size-checked entry point (pixel float32, int8_full, q15, q7; the firmware feeds
    it one camera frame and the state) rather than the MLP's ``forward(obs, action)``. ``reps`` forward passes
    are timed (SysTick under ``-icount shift=0``, calibrated in the same run). ``opt``: the policy source's
    optimisation flag (the firmware's ``POLICY_OPT``).
    """
    if target not in QEMU_BOARDS:
        raise ConfigError(f"no QEMU board for {target!r}; valid: {', '.join(QEMU_BOARDS)}")
    if not qemu_available():
        raise ToolchainError("instruction counts need arm-none-eabi-gcc, cmake and qemu-system-arm (apt-get install "
                             "gcc-arm-none-eabi libnewlib-arm-none-eabi cmake qemu-system-arm)")
    if not (firmware_dir / "CMakeLists.txt").is_file():
        raise ToolchainError(f"no firmware example at {firmware_dir} (it ships in the repository, not the package)")
    board, machine = QEMU_BOARDS[target]
    build = build_dir / f"fw-{board}{opt}"
    _run(["cmake", "-S", str(firmware_dir), "-B", str(build),
          f"-DCMAKE_TOOLCHAIN_FILE={firmware_dir / 'cmake' / 'arm-none-eabi.cmake'}", f"-DPOLICY_DIR={policy_dir}",
          f"-DPOLICY_NAME={name}", f"-DBOARD={board}", f"-DPOLICY_API={'checked' if checked_api else 'plain'}",
          f"-DBENCH_REPS={reps}", f"-DPOLICY_OPT={opt}"])
    _run(["cmake", "--build", str(build)])
    proc = subprocess.run(["qemu-system-arm", "-M", machine, "-nographic", "-icount", "shift=0", "-semihosting",
                           "-kernel", str(build / "policy_fw.elf")], capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr  # semihosting output goes to stderr
    fields = dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
    if "insn_per_forward" not in fields or fields.get("rc", "0") != "0":
        raise ToolchainError(f"the firmware on {machine} did not report a forward pass:\n{text[-2000:]}")
    return QemuCost(target, board, int(fields["insn_per_forward"]), int(fields["stack_bytes"]),
                    [int(w, 16) for w in fields["action"].split(",")])
