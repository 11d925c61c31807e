/* Minimal Cortex-M start-up shared by every board: vector table, .data/.bss set-up, FPU on (when there is one),
   main(). */
#include <stdint.h>

extern uint32_t _estack, _sidata, _sdata, _edata, _sbss, _ebss;
int main(void);
void Reset_Handler(void);
void SysTick_Handler(void);

static void default_handler(void)
{
    for (;;) {
    }
}

void SysTick_Handler(void) __attribute__((weak, alias("default_handler")));

__attribute__((section(".isr_vector"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))&_estack, Reset_Handler, default_handler, default_handler, /* SP, reset, NMI, HardFault */
    default_handler, default_handler, default_handler, 0, 0, 0, 0,             /* MemManage, Bus, Usage */
    default_handler, default_handler, 0, default_handler, SysTick_Handler,      /* SVC, Debug, -, PendSV */
};

void Reset_Handler(void)
{
    uint32_t *src = &_sidata, *dst;
    for (dst = &_sdata; dst < &_edata;) {
        *dst++ = *src++;
    }
    for (dst = &_sbss; dst < &_ebss;) {
        *dst++ = 0;
    }
#if defined(__ARM_FP)
    /* Full access to the FPU (CP10, CP11) before any float instruction runs. */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm volatile("dsb\n\tisb");
#endif
    main();
    for (;;) {
    }
}
