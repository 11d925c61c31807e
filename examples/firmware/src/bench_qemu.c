/* Cost of one forward pass on an emulated Cortex-M (QEMU MPS2 AN386 = M4, AN500 = M7).
 *
 * Run with `qemu-system-arm -M mps2-an386 -nographic -icount shift=0 -semihosting -kernel policy_fw.elf`.
 * With -icount shift=0 QEMU advances virtual time by 1 ns per executed instruction, so SysTick (which counts
 * CPU clocks at CPU_HZ) measures instructions. The ratio instructions/tick is calibrated in the same run
 * with a loop of known length (2 instructions per iteration), so no clock frequency is assumed.
 * Peak stack: the stack below the current frame is painted, the policy runs, the untouched paint is counted.
 * Inputs: obs/state[i] = 0.25 (((7 i) mod 11) - 5) (q15, q7: the int16 1000 (((7 i) mod 11) - 5)); camera frame
 * byte p = (37 p + 11) mod 256. Output (semihosting): "insn_per_forward=<n> stack_bytes=<n> ... rc=<status>
 * action=<hex float bits, or the int16 values of a q15 or q7 policy>,..." then exit.
 */
#include <stdint.h>

#include "policy_call.h"

#ifndef BENCH_REPS
#define BENCH_REPS 20u
#endif
#define REPS BENCH_REPS
#define PAINT_WORDS 2048u
#define PAINT 0xC5C5C5C5u

static void semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}

static char line[512];
static unsigned pos;

static void put_str(const char *s)
{
    while (*s && pos < sizeof line - 1) {
        line[pos++] = *s++;
    }
}

static void put_uint(uint32_t v, unsigned base)
{
    char tmp[12];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    while (n) {
        char c[2] = {tmp[--n], 0};
        put_str(c);
    }
}

static uint32_t elapsed(uint32_t start)
{
    return (start - SYST_CVR) & 0x00FFFFFFu; /* SysTick counts down, 24 bits */
}

static void __attribute__((noinline)) spin(uint32_t n)
{
#if __ARM_ARCH_ISA_THUMB == 1 /* ARMv6-M: GCC reads Thumb-1 inline asm in divided syntax (sub sets flags) */
    __asm volatile("1: sub %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
#else
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
#endif
}

static fw_io_t obs[FW_OBS_LEN], action[FW_ACTION_DIM];
static unsigned char frame[FW_FRAME_BYTES];
static int rc;

static uint32_t __attribute__((noinline)) stack_probe(void)
{
    volatile uint32_t *sp, *p;
    uint32_t i, untouched = 0;
    __asm volatile("mov %0, sp" : "=r"(sp));
    p = sp; /* ARM has no red zone: nothing of this frame lives below sp */
    for (i = 1; i <= PAINT_WORDS; ++i) {
        p[-(int32_t)i] = PAINT;
    }
    rc |= fw_forward(frame, obs, action);
    for (i = PAINT_WORDS; i >= 1 && p[-(int32_t)i] == PAINT; --i) {
        untouched++;
    }
    return (PAINT_WORDS - untouched) * 4u;
}

int main(void)
{
    uint32_t i, t, calib_ticks, fwd_ticks = 0, stack;
    const uint32_t calib_iters = 200000u;
    for (i = 0; i < FW_OBS_LEN; ++i) {
#if FW_FIXED_IO
        obs[i] = (int16_t)(1000 * ((int32_t)((i * 7u) % 11u) - 5));
#else
        obs[i] = 0.25f * (float)((int32_t)((i * 7u) % 11u) - 5);
#endif
    }
    for (i = 0; i < FW_FRAME_BYTES; ++i) {
        frame[i] = (unsigned char)((37u * i + 11u) & 0xFFu);
    }
    SYST_RVR = 0x00FFFFFFu;
    SYST_CVR = 0;
    SYST_CSR = SYST_ENABLE | SYST_CPU_CLOCK;

    t = SYST_CVR;
    spin(calib_iters);
    calib_ticks = elapsed(t);
    rc |= fw_forward(frame, obs, action); /* warm-up: nothing is cached under QEMU, but keep the runs identical */
    for (i = 0; i < REPS; ++i) {
        t = SYST_CVR;
        rc |= fw_forward(frame, obs, action);
        fwd_ticks += elapsed(t);
    }
    stack = stack_probe();

    /* instructions per forward = fwd_ticks / REPS * (2 * calib_iters / calib_ticks), in integers */
    put_str("insn_per_forward=");
    put_uint((uint32_t)(((uint64_t)fwd_ticks * 2u * calib_iters) / ((uint64_t)calib_ticks * REPS)), 10);
    put_str(" stack_bytes=");
    put_uint(stack, 10);
    put_str(" ticks_per_forward=");
    put_uint(fwd_ticks / REPS, 10);
    put_str(" calib_ticks=");
    put_uint(calib_ticks, 10);
    put_str(" rc=");
    put_uint((uint32_t)(rc != FW_RC_OK), 10);
    put_str(" action=");
    for (i = 0; i < FW_ACTION_DIM; ++i) {
#if FW_FIXED_IO
        put_uint((uint16_t)action[i], 16);
#else
        union { float f; uint32_t u; } bits;
        bits.f = action[i];
        put_uint(bits.u, 16);
#endif
        put_str(i + 1 < FW_ACTION_DIM ? "," : "\n");
    }
    semihost(0x04, line);                     /* SYS_WRITE0 */
    semihost(0x18, (const void *)0x20026u);   /* SYS_EXIT, ADP_Stopped_ApplicationExit */
    return 0;
}
