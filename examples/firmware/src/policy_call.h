/* One call for every exported API, so the loop and the benchmark do not depend on which variant was exported.
 *
 * FW_CHECKED_API 0: the MLP variants (float32, int8): void <name>_forward(const float *obs, float *action).
 * FW_CHECKED_API 1: the size-checked entry point (pixel float32, int8_full, q15, q7): at most one camera, fed a
 *                   uint8 HWC frame, then the state if the policy has one; int16 state and action for q15 and q7
 *                   (Q formats in the header: <NAME>_STATE_FRAC_BITS_INIT, <NAME>_ACTION_FRAC_BITS), float otherwise.
 */
#ifndef POLICY_CALL_H_
#define POLICY_CALL_H_
#include <stddef.h>
#include <stdint.h>

#include "cortex_m.h"
#include POLICY_HEADER

#if FW_CHECKED_API
#define FW_STATE_DIM PASTE(POLICY_NAME_UP, _STATE_DIM)
#define FW_NUM_CAMERAS PASTE(POLICY_NAME_UP, _NUM_CAMERAS)
/* 1 for the fixed-point variants (q15, q7: int16 state and action), 0 (both undefined) otherwise */
#define FW_FIXED_IO (PASTE(POLICY_NAME_UP, _Q15) || PASTE(POLICY_NAME_UP, _Q7))
#if FW_NUM_CAMERAS > 1
#error "the firmware example feeds one camera; extend fw_forward for more"
#endif
#if FW_NUM_CAMERAS == 1
#define FW_FRAME_BYTES PASTE(POLICY_NAME_UP, _CAMERA0_BYTES)
#else
#define FW_FRAME_BYTES 1
#endif
#if FW_FIXED_IO
typedef int16_t fw_io_t;
#else
typedef float fw_io_t;
#endif
#define FW_OBS_LEN (FW_STATE_DIM > 0 ? FW_STATE_DIM : 1)
#define FW_RC_OK PASTE(POLICY_NAME_UP, _OK)
#else
#define FW_STATE_DIM FW_OBS_DIM
#define FW_NUM_CAMERAS 0
#define FW_FIXED_IO 0
#define FW_FRAME_BYTES 1
#define FW_OBS_LEN FW_OBS_DIM
#define FW_RC_OK 0
typedef float fw_io_t;
#endif

/* Returns the policy's status (0 = ok; the checked API rejects wrong sizes and NULL pointers). */
static inline int fw_forward(const unsigned char *frame, const fw_io_t *state, fw_io_t *action)
{
#if FW_CHECKED_API
    (void)frame;
    (void)state;
    return FW_FORWARD(
#if FW_NUM_CAMERAS == 1
        frame, FW_FRAME_BYTES,
#endif
#if FW_STATE_DIM > 0
        state, FW_STATE_DIM,
#endif
        action, FW_ACTION_DIM);
#else
    (void)frame;
    FW_FORWARD(state, action);
    return 0;
#endif
}

#endif
