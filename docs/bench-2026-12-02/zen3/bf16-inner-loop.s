# TreeLSTM H=256, compile(precision="bf16"), llvm -mcpu=znver3 (AVX2): the start of the level GEMM's inner loop
# (2 nodes x 5 gates x 8 lanes; U_packed read as uint16, widened by vpmovzxwd + vpslld $16)
	vpmovzxwd	-272(%rdi), %ymm7
	vpmovzxwd	-256(%rdi), %ymm13
	vbroadcastss	-28(%rax,%rcx), %ymm9
	vpslld	$16, %ymm4, %ymm4
	vpslld	$16, %ymm0, %ymm0
	vpslld	$16, %ymm3, %ymm3
	vpslld	$16, %ymm7, %ymm7
	vpslld	$16, %ymm13, %ymm13
	vfmadd231ps	%ymm9, %ymm4, %ymm8
	vfmadd231ps	%ymm9, %ymm0, %ymm11
	vfmadd231ps	%ymm9, %ymm3, %ymm12
	vfmadd231ps	%ymm9, %ymm7, %ymm14
	vfmadd231ps	%ymm9, %ymm13, %ymm10
	vbroadcastss	-28(%r9,%rcx), %ymm9
	vfmadd231ps	%ymm4, %ymm9, %ymm1
	vpmovzxwd	-224(%rdi), %ymm4
	vfmadd231ps	%ymm0, %ymm9, %ymm5
	vpmovzxwd	-240(%rdi), %ymm0
	vfmadd231ps	%ymm3, %ymm9, %ymm6
	vfmadd231ps	%ymm7, %ymm9, %ymm15
	vfmadd231ps	%ymm9, %ymm13, %ymm2
	vpmovzxwd	-208(%rdi), %ymm7
	vpmovzxwd	-192(%rdi), %ymm9
	vpmovzxwd	-176(%rdi), %ymm13
	vbroadcastss	-24(%rax,%rcx), %ymm3
	vpslld	$16, %ymm0, %ymm0
	vpslld	$16, %ymm4, %ymm4
	vpslld	$16, %ymm7, %ymm7
	vpslld	$16, %ymm9, %ymm9
	vpslld	$16, %ymm13, %ymm13
	vfmadd231ps	%ymm3, %ymm0, %ymm8
	vfmadd231ps	%ymm3, %ymm4, %ymm11
	vfmadd231ps	%ymm3, %ymm7, %ymm12
