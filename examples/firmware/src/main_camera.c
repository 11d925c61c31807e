/* Fixed-rate control loop for a camera policy (POLICY_API=checked: pixel float32, int8_full, q15 or q7 exports).
 *
 * Every 1/CONTROL_HZ s: capture a uint8 HWC frame (rows top to bottom, channels interleaved, exactly
 * <NAME>_CAMERA0_BYTES = H*W*C bytes) into `frame`, read the proprioceptive state, run the policy, command the
 * actuators. camera_capture / read_state / write_action are weak: replace them with your camera driver (DCMI + DMA
 * on an STM32, an SPI/parallel camera, ...) and your sensors and motors. For q15 and q7 exports the state and
 * action are int16 in the Q formats of the header (<NAME>_STATE_FRAC_BITS_INIT, <NAME>_ACTION_FRAC_BITS): no float
 * on an FPU-less core. A call the policy rejects (a frame of the wrong size) is counted and no action is written.
 */
#include <stdint.h>

#include "policy_call.h"

static volatile uint32_t ticks;
volatile uint32_t overruns;   /* control periods missed because the previous step was still running */
volatile uint32_t rejected;   /* calls the policy refused (its return code was not OK) */
volatile fw_io_t last_action[FW_ACTION_DIM];

void SysTick_Handler(void)
{
    ticks++;
}

/* Fill `frame` (bytes long) with the newest image; the default draws a moving test pattern. */
__attribute__((weak)) void camera_capture(unsigned char *frame, size_t bytes, uint32_t step)
{
    size_t i;
    for (i = 0; i < bytes; ++i) {
        frame[i] = (unsigned char)((i * 37u + step) & 0xFFu);
    }
}

__attribute__((weak)) void read_state(fw_io_t *state, int n, uint32_t step)
{
    int i;
    for (i = 0; i < n; ++i) {
#if FW_FIXED_IO
        state[i] = (int16_t)((int32_t)((step + (uint32_t)i) % 100u) * 64 - 3200);
#else
        state[i] = 0.01f * (float)((step + (uint32_t)i) % 100u) - 0.5f;
#endif
    }
}

__attribute__((weak)) void write_action(const fw_io_t *action, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        last_action[i] = action[i];
    }
}

int main(void)
{
    static unsigned char frame[FW_FRAME_BYTES];
    static fw_io_t state[FW_OBS_LEN];
    static fw_io_t action[FW_ACTION_DIM];
    uint32_t step = 0, seen = 0;

    SYST_RVR = CPU_HZ / CONTROL_HZ - 1u;
    SYST_CVR = 0;
    SYST_CSR = SYST_ENABLE | SYST_TICKINT | SYST_CPU_CLOCK;
    for (;;) {
        while (ticks == seen) {
            __asm volatile("wfi");
        }
        if (ticks - seen > 1u) {
            overruns += ticks - seen - 1u;
        }
        seen = ticks;
        if (FW_NUM_CAMERAS > 0) {
            camera_capture(frame, sizeof frame, step);
        }
        read_state(state, FW_STATE_DIM, step);
        if (fw_forward(frame, state, action) == FW_RC_OK) {
            write_action(action, FW_ACTION_DIM);
        } else {
            rejected++;
        }
        step++;
    }
}
