/* Fixed-rate control loop: every 1/CONTROL_HZ s read the sensors, run the policy, command the actuators.
 *
 * read_observation / write_action are weak: replace them with your board's sensor and motor code (the
 * observation must be laid out exactly as the task's `state`, raw, not normalised: the policy normalises).
 */
#include <stdint.h>

#include "cortex_m.h"
#include POLICY_HEADER

static volatile uint32_t ticks;
volatile uint32_t overruns;   /* control periods missed because the previous step was still running */
volatile float last_action[FW_ACTION_DIM];

void SysTick_Handler(void)
{
    ticks++;
}

__attribute__((weak)) void read_observation(float *obs, int n, uint32_t step)
{
    int i;
    for (i = 0; i < n; ++i) {
        obs[i] = 0.01f * (float)((step + (uint32_t)i) % 100u) - 0.5f;
    }
}

__attribute__((weak)) void write_action(const float *action, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        last_action[i] = action[i];
    }
}

int main(void)
{
    static float obs[FW_OBS_DIM];
    static float action[FW_ACTION_DIM];
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
        read_observation(obs, FW_OBS_DIM, step);
        FW_FORWARD(obs, action);
        write_action(action, FW_ACTION_DIM);
        step++;
    }
}
