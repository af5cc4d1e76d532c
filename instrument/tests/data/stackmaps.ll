; Fixture for instrument/tests/stackmap.rs: two functions with
; llvm.experimental.stackmap calls, linked into a small executable.
;
; Expected records (the test checks these):
;   @sm_first:  id 101: Register (%a live in a register), Constant 7,
;                       Constant -3, ConstantIndex 0x0123456789abcdef
;               id 102: Direct (an alloca), ConstantIndex 0x0123456789abcdef
;                       (the pool holds the large constant once)
;   @sm_second: id 201: eight values live across a call; the ones that do
;               not fit in callee-saved registers are spilled (Indirect),
;               plus ConstantIndex 0xfedcba9876543210.
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

declare void @llvm.experimental.stackmap(i64, i32, ...)
declare void @llvm.experimental.patchpoint.void(i64, i32, ptr, i32, ...)

define i64 @sm_first(i64 %a) noinline {
entry:
  %slot = alloca i64, align 8
  store i64 %a, ptr %slot, align 8
  call void @sm_sink(ptr %slot)
  call void (i64, i32, ...) @llvm.experimental.stackmap(i64 101, i32 0, i64 %a, i64 7, i64 -3, i64 81985529216486895)
  %r = call i64 @sm_value(i64 %a)
  call void (i64, i32, ...) @llvm.experimental.stackmap(i64 102, i32 0, ptr %slot, i64 81985529216486895)
  %sum = add i64 %r, %a
  ret i64 %sum
}

define i64 @sm_second(i64 %x) noinline {
entry:
  %v0 = call i64 @sm_value(i64 %x)
  %v1 = call i64 @sm_value(i64 %v0)
  %v2 = call i64 @sm_value(i64 %v1)
  %v3 = call i64 @sm_value(i64 %v2)
  %v4 = call i64 @sm_value(i64 %v3)
  %v5 = call i64 @sm_value(i64 %v4)
  %v6 = call i64 @sm_value(i64 %v5)
  %v7 = call i64 @sm_value(i64 %v6)
  call void (i64, i32, ...) @llvm.experimental.stackmap(i64 201, i32 0, i64 %v0, i64 %v1, i64 %v2, i64 %v3, i64 %v4, i64 %v5, i64 %v6, i64 %v7, i64 -81985529216486896)
  %w = call i64 @sm_value(i64 %x)
  call void (i64, i32, ptr, i32, ...) @llvm.experimental.patchpoint.void(i64 202, i32 16, ptr null, i32 0, i64 %w)
  %s0 = add i64 %v0, %v1
  %s1 = add i64 %s0, %v2
  %s2 = add i64 %s1, %v3
  %s3 = add i64 %s2, %v4
  %s4 = add i64 %s3, %v5
  %s5 = add i64 %s4, %v6
  %s6 = add i64 %s5, %v7
  %s7 = add i64 %s6, %w
  ret i64 %s7
}

; Opaque to the optimiser: the calls and the stores they observe stay.
define void @sm_sink(ptr %p) noinline {
  call void asm sideeffect "", "r,~{memory}"(ptr %p)
  ret void
}

define i64 @sm_value(i64 %v) noinline {
  %r = call i64 asm sideeffect "lea 1($1), $0", "=r,r,~{memory}"(i64 %v)
  ret i64 %r
}

define i32 @main() {
  %a = call i64 @sm_first(i64 5)
  %b = call i64 @sm_second(i64 %a)
  %c = trunc i64 %b to i32
  ret i32 %c
}
