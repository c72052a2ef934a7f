// vdpbf16ps throughput on one core with and without a separate vbroadcastss per instruction (Zen 4 VM, 2026-12-07):
//   gcc -O2 -march=cooperlake broadcast_probe.c -o broadcast_probe && ./broadcast_probe
// (the register tiles of the level pass: 8 nodes x 1 vector, each node's pair broadcast against the weight's vector)
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
float buf[1024] __attribute__((aligned(64)));
#define E(i,a) "vdpbf16ps " #i "(%0)%{1to16%},%%zmm15,%%zmm" #a "\n\t"
#define D(a,r,v) "vdpbf16ps %%zmm" #v ",%%zmm" #r ",%%zmm" #a "\n\t"
#define B(i,r) "vbroadcastss " #i "(%0),%%zmm" #r "\n\t"
#define CL "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm16","xmm17","xmm18","xmm19","xmm20","xmm21","xmm22","xmm23","xmm24","xmm25","xmm26","xmm27"
int main(){
  long N=100000000; double t; float *p=buf;
  t=now(); for(long n=0;n<N;n++) __asm__ volatile(
     E(0,0) E(4,1) E(8,2) E(12,3) E(16,4) E(20,5) E(24,6) E(28,7) E(32,8) E(36,9) E(40,10) E(44,11) :: "r"(p) : CL);
  printf("12 embedded-broadcast vdpbf16ps: %.2f G/s\n", N*12/(now()-t)/1e9);
  t=now(); for(long n=0;n<N;n++) __asm__ volatile(
     "vmovups 128(%0),%%zmm14\n\t" "vmovups 192(%0),%%zmm15\n\t"
     B(0,16) D(0,16,14) D(1,16,15) B(4,17) D(2,17,14) D(3,17,15) B(8,18) D(4,18,14) D(5,18,15) B(12,19) D(6,19,14) D(7,19,15)
     B(16,20) D(8,20,14) D(9,20,15) B(20,21) D(10,21,14) D(11,21,15) B(24,22) D(12,22,14) D(13,22,15) B(28,23) D(24,23,14) D(25,23,15)
     :: "r"(p) : CL);
  printf("8x2 tile (8 bcast + 2 loads + 16 dpbf16): %.2f G dpbf16/s\n", N*16/(now()-t)/1e9);
  t=now(); for(long n=0;n<N;n++) __asm__ volatile(
     "vmovups 128(%0),%%zmm14\n\t"
     B(0,16) D(0,16,14) B(4,17) D(1,17,14) B(8,18) D(2,18,14) B(12,19) D(3,19,14)
     B(16,20) D(4,20,14) B(20,21) D(5,21,14) B(24,22) D(6,22,14) B(28,23) D(7,23,14)
     :: "r"(p) : CL);
  printf("8x1 tile (8 bcast + 1 load + 8 dpbf16): %.2f G dpbf16/s\n", N*8/(now()-t)/1e9);
  t=now(); for(long n=0;n<N;n++) __asm__ volatile(
     "vmovups 128(%0),%%zmm15\n\t"
     E(0,0) E(4,1) E(8,2) E(12,3) E(16,4) E(20,5) E(24,6) E(28,7)
     :: "r"(p) : CL);
  printf("8x1 tile, embedded broadcast: %.2f G dpbf16/s\n", N*8/(now()-t)/1e9);
}
