//go:build !purego

#include "textflag.h"

// LANES accumulates two lanes: 16 bytes of input at off(SI) with the key at
// off(DX) into ACC. With d the input and k = d ^ key, each 64-bit lane adds
// the other lane's d and lo32(k) * hi32(k).
#define LANES(off, ACC) \
	MOVOU off(SI), X0; \
	MOVOU off(DX), X1; \
	PXOR X0, X1; \
	PSHUFD $0x31, X1, X2; \
	PMULULQ X2, X1; \
	PSHUFD $0x4e, X0, X0; \
	PADDQ X0, ACC; \
	PADDQ X1, ACC

#define STRIPE \
	LANES(0, X4); \
	LANES(16, X5); \
	LANES(32, X6); \
	LANES(48, X7)

// func accumulate(a *[8]uint64, p *uint32, stripes int, last *uint32)
TEXT ·accumulate(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ stripes+16(FP), CX
	MOVQ last+24(FP), DI
	MOVOU 0(AX), X4
	MOVOU 16(AX), X5
	MOVOU 32(AX), X6
	MOVOU 48(AX), X7
	LEAQ ·stripeKey(SB), DX

loop:
	TESTQ CX, CX
	JZ    tail
	STRIPE
	ADDQ  $64, SI
	ADDQ  $8, DX
	DECQ  CX
	JMP   loop

tail:
	MOVQ DI, SI
	LEAQ ·lastKey(SB), DX
	STRIPE
	MOVOU X4, 0(AX)
	MOVOU X5, 16(AX)
	MOVOU X6, 32(AX)
	MOVOU X7, 48(AX)
	RET
