/* The few core registers the examples use (identical on every Cortex-M; no vendor HAL needed). */
#ifndef CORTEX_M_H_
#define CORTEX_M_H_
#include <stdint.h>

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_ENABLE 1u
#define SYST_TICKINT 2u
#define SYST_CPU_CLOCK 4u

#define PASTE2(a, b) a##b
#define PASTE(a, b) PASTE2(a, b)
/* Generic names for the exported policy's symbols (POLICY_NAME / POLICY_NAME_UP come from CMake). */
#define FW_FORWARD PASTE(POLICY_NAME, _forward)
#define FW_OBS_DIM PASTE(POLICY_NAME_UP, _OBS_DIM)
#define FW_ACTION_DIM PASTE(POLICY_NAME_UP, _ACTION_DIM)

#endif
