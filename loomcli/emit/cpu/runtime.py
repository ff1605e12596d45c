"""The CPU device's run-time, as LLVM IR linked into every kernel module.

A launch runs its workgroups one after another on one thread. A kernel
whose body has no barrier and no subgroup operation runs its invocations
in a plain loop. Any other kernel runs each invocation of a workgroup as a
fiber: its own stack (given by the host), switched to and from by
`loom_cpu_switch`, twelve instructions of x86-64 assembly that save the
callee-saved registers and swap stack pointers. A scheduler resumes the
unfinished fibers in order; a fiber that reaches a barrier counts itself
in and yields until the last member of its scope (the subgroup, or the
workgroup) arrives. So each invocation runs up to its next barrier before
the next one starts: the work-item order within a barrier-free stretch is
the invocation order, every run is deterministic, and atomics need no
locking. If a pass over the fibers finds every unfinished one waiting
and none arriving, the launch has deadlocked (a barrier some invocations
skipped) and `loom_cpu_run` returns 1.

Half-precision conversions: x86-64 without F16C has no instruction for
them, and LLVM calls `__extendhfsf2`, `__truncsfhf2` and `__truncdfhf2`,
which live in compiler-rt or a recent libgcc, neither of which the process
is sure to hold. They are defined here, with integer operations and one
float addition whose rounding is the conversion's (round to nearest even,
as every device converts): F. Giesen's method, for doubles with a
magic number whose ulp is 2^-24. NaNs keep the top payload bits, quieted.

Lane exchanges (`loom_cpu_shuffle`, the shared lowering's subgroup
reductions) go through one 32-bit slot per invocation between two
subgroup barriers. Subgroups are consecutive runs of `subgroup_size`
linear invocation ids, as on the reference interpreter.

State lives in this module's globals (each loaded kernel module has its
own) and is read with volatile accesses wherever a fiber switch may lie
between a write and a read: the switch is an opaque call, but volatile
keeps the optimizer from caching a value across it in any case.
"""

from __future__ import annotations

MAX_INVOCATIONS = 1024   # the profile's max_flat_workgroup_size

# Status codes of loom_cpu_run.
OK, DEADLOCK = 0, 1

RUNTIME_IR = r"""
module asm ".text"
module asm ".p2align 4"
module asm ".type loom_cpu_switch,@function"
module asm "loom_cpu_switch:"
module asm "  pushq %rbp"
module asm "  pushq %rbx"
module asm "  pushq %r12"
module asm "  pushq %r13"
module asm "  pushq %r14"
module asm "  pushq %r15"
module asm "  movq %rsp, (%rdi)"
module asm "  movq %rsi, %rsp"
module asm "  popq %r15"
module asm "  popq %r14"
module asm "  popq %r13"
module asm "  popq %r12"
module asm "  popq %rbx"
module asm "  popq %rbp"
module asm "  retq"
module asm ".size loom_cpu_switch, .-loom_cpu_switch"
module asm ".p2align 4"
module asm ".type loom_cpu_fiber_start,@function"
module asm "loom_cpu_fiber_start:"
module asm "  movq %r12, %rdi"
module asm "  callq *%r13"
module asm "  ud2"
module asm ".size loom_cpu_fiber_start, .-loom_cpu_fiber_start"

declare void @loom_cpu_switch(ptr, ptr)
declare void @loom_cpu_fiber_start()

@loom_cpu.cur = internal global i32 0
@loom_cpu.n = internal global i32 1
@loom_cpu.size = internal global [3 x i32] zeroinitializer
@loom_cpu.group = internal global [3 x i32] zeroinitializer
@loom_cpu.count = internal global [3 x i32] zeroinitializer
@loom_cpu.sgsize = internal global i32 1
@loom_cpu.entry = internal global ptr null
@loom_cpu.kernarg = internal global ptr null
@loom_cpu.sched = internal global ptr null
@loom_cpu.sp = internal global [1024 x ptr] zeroinitializer
@loom_cpu.done = internal global [1024 x i8] zeroinitializer
@loom_cpu.slot = internal global [1024 x i32] zeroinitializer
@loom_cpu.wg = internal global [2 x i32] zeroinitializer
@loom_cpu.sg = internal global [2048 x i32] zeroinitializer
@loom_cpu.progress = internal global i32 0

define internal i32 @loom_cpu.get(ptr %p, i32 %k) alwaysinline {
  %a = getelementptr [3 x i32], ptr %p, i32 0, i32 %k
  %v = load volatile i32, ptr %a
  ret i32 %v
}

define i32 @loom_cpu_workitem_id(i32 %k) alwaysinline {
  %lin = load volatile i32, ptr @loom_cpu.cur
  %sx = call i32 @loom_cpu.get(ptr @loom_cpu.size, i32 0)
  %sy = call i32 @loom_cpu.get(ptr @loom_cpu.size, i32 1)
  %x = urem i32 %lin, %sx
  %q = udiv i32 %lin, %sx
  %y = urem i32 %q, %sy
  %z = udiv i32 %q, %sy
  switch i32 %k, label %rz [ i32 0, label %rx
                             i32 1, label %ry ]
rx:
  ret i32 %x
ry:
  ret i32 %y
rz:
  ret i32 %z
}

define i32 @loom_cpu_workgroup_id(i32 %k) alwaysinline {
  %v = call i32 @loom_cpu.get(ptr @loom_cpu.group, i32 %k)
  ret i32 %v
}

define i32 @loom_cpu_workgroup_size(i32 %k) alwaysinline {
  %v = call i32 @loom_cpu.get(ptr @loom_cpu.size, i32 %k)
  ret i32 %v
}

define i32 @loom_cpu_workgroup_count(i32 %k) alwaysinline {
  %v = call i32 @loom_cpu.get(ptr @loom_cpu.count, i32 %k)
  ret i32 %v
}

define i32 @loom_cpu_subgroup_size() alwaysinline {
  %v = load volatile i32, ptr @loom_cpu.sgsize
  ret i32 %v
}

define i32 @loom_cpu_lane_id() alwaysinline {
  %lin = load volatile i32, ptr @loom_cpu.cur
  %sg = load volatile i32, ptr @loom_cpu.sgsize
  %v = urem i32 %lin, %sg
  ret i32 %v
}

; Lanes of the calling invocation's subgroup: a short last subgroup has fewer.
define i32 @loom_cpu_active_lanes() alwaysinline {
  %lin = load volatile i32, ptr @loom_cpu.cur
  %sg = load volatile i32, ptr @loom_cpu.sgsize
  %n = load volatile i32, ptr @loom_cpu.n
  %lane = urem i32 %lin, %sg
  %first = sub i32 %lin, %lane
  %left = sub i32 %n, %first
  %less = icmp ult i32 %left, %sg
  %v = select i1 %less, i32 %left, i32 %sg
  ret i32 %v
}

define internal void @loom_cpu.yield() noinline {
  %i = load volatile i32, ptr @loom_cpu.cur
  %spp = getelementptr [1024 x ptr], ptr @loom_cpu.sp, i32 0, i32 %i
  %to = load volatile ptr, ptr @loom_cpu.sched
  call void @loom_cpu_switch(ptr %spp, ptr %to)
  ret void
}

; A barrier over %members invocations whose counters are at %ctr (arrived, generation).
define internal void @loom_cpu.wait(ptr %ctr, i32 %members) noinline {
entry:
  %genp = getelementptr i32, ptr %ctr, i32 1
  %gen = load volatile i32, ptr %genp
  %arrived = load volatile i32, ptr %ctr
  %now = add i32 %arrived, 1
  store volatile i32 1, ptr @loom_cpu.progress
  %last = icmp eq i32 %now, %members
  br i1 %last, label %release, label %count
release:
  store volatile i32 0, ptr %ctr
  %next = add i32 %gen, 1
  store volatile i32 %next, ptr %genp
  ret void
count:
  store volatile i32 %now, ptr %ctr
  br label %spin
spin:
  call void @loom_cpu.yield()
  %g = load volatile i32, ptr %genp
  %same = icmp eq i32 %g, %gen
  br i1 %same, label %spin, label %out
out:
  store volatile i32 1, ptr @loom_cpu.progress
  ret void
}

define void @loom_cpu_workgroup_barrier() {
  %n = load volatile i32, ptr @loom_cpu.n
  call void @loom_cpu.wait(ptr @loom_cpu.wg, i32 %n)
  ret void
}

define internal ptr @loom_cpu.sg_counters() alwaysinline {
  %lin = load volatile i32, ptr @loom_cpu.cur
  %sg = load volatile i32, ptr @loom_cpu.sgsize
  %s = udiv i32 %lin, %sg
  %k = mul i32 %s, 2
  %p = getelementptr [2048 x i32], ptr @loom_cpu.sg, i32 0, i32 %k
  ret ptr %p
}

define void @loom_cpu_subgroup_barrier() {
  %p = call ptr @loom_cpu.sg_counters()
  %n = call i32 @loom_cpu_active_lanes()
  call void @loom_cpu.wait(ptr %p, i32 %n)
  ret void
}

; %v of lane %src of the caller's subgroup (its own %v when there is no such lane).
define i32 @loom_cpu_shuffle(i32 %v, i32 %src) {
entry:
  %lin = load volatile i32, ptr @loom_cpu.cur
  %mine = getelementptr [1024 x i32], ptr @loom_cpu.slot, i32 0, i32 %lin
  store volatile i32 %v, ptr %mine
  call void @loom_cpu_subgroup_barrier()
  %sg = load volatile i32, ptr @loom_cpu.sgsize
  %lane = urem i32 %lin, %sg
  %first = sub i32 %lin, %lane
  %n = call i32 @loom_cpu_active_lanes()
  %ok = icmp ult i32 %src, %n
  br i1 %ok, label %read, label %own
read:
  %at = add i32 %first, %src
  %theirs = getelementptr [1024 x i32], ptr @loom_cpu.slot, i32 0, i32 %at
  %r = load volatile i32, ptr %theirs
  br label %out
own:
  br label %out
out:
  %x = phi i32 [ %r, %read ], [ %v, %own ]
  call void @loom_cpu_subgroup_barrier()
  ret i32 %x
}

define internal void @loom_cpu.fiber_main(i64 %i) noreturn {
  %e = load volatile ptr, ptr @loom_cpu.entry
  %k = load volatile ptr, ptr @loom_cpu.kernarg
  call void %e(ptr %k)
  %i32 = trunc i64 %i to i32
  %d = getelementptr [1024 x i8], ptr @loom_cpu.done, i32 0, i32 %i32
  store volatile i8 1, ptr %d
  store volatile i32 1, ptr @loom_cpu.progress
  call void @loom_cpu.yield()
  unreachable
}

define internal void @loom_cpu.set3(ptr %dst, ptr %src) alwaysinline {
  %a = load i32, ptr %src
  %pb = getelementptr i32, ptr %src, i32 1
  %b = load i32, ptr %pb
  %pc = getelementptr i32, ptr %src, i32 2
  %c = load i32, ptr %pc
  store volatile i32 %a, ptr %dst
  %qb = getelementptr i32, ptr %dst, i32 1
  store volatile i32 %b, ptr %qb
  %qc = getelementptr i32, ptr %dst, i32 2
  store volatile i32 %c, ptr %qc
  ret void
}

; Run every workgroup of a launch. %geometry: i32 counts x, y, z, sizes x,
; y, z, subgroup size, fibers (0: a plain loop). %stacks: one block of
; %stack_bytes bytes per invocation (fibers only; 16-byte aligned).
define i32 @loom_cpu_run(ptr %kernel, ptr %kernarg, ptr %geometry, ptr %stacks, i64 %stack_bytes) {
entry:
  store volatile ptr %kernel, ptr @loom_cpu.entry
  store volatile ptr %kernarg, ptr @loom_cpu.kernarg
  call void @loom_cpu.set3(ptr @loom_cpu.count, ptr %geometry)
  %psize = getelementptr i32, ptr %geometry, i32 3
  call void @loom_cpu.set3(ptr @loom_cpu.size, ptr %psize)
  %psg = getelementptr i32, ptr %geometry, i32 6
  %sgv = load i32, ptr %psg
  store volatile i32 %sgv, ptr @loom_cpu.sgsize
  %pfib = getelementptr i32, ptr %geometry, i32 7
  %fib = load i32, ptr %pfib
  %fibers = icmp ne i32 %fib, 0
  %gx = load i32, ptr %geometry
  %pgy = getelementptr i32, ptr %geometry, i32 1
  %gy = load i32, ptr %pgy
  %pgz = getelementptr i32, ptr %geometry, i32 2
  %gz = load i32, ptr %pgz
  %sx = load i32, ptr %psize
  %psy = getelementptr i32, ptr %geometry, i32 4
  %sy = load i32, ptr %psy
  %psz = getelementptr i32, ptr %geometry, i32 5
  %sz = load i32, ptr %psz
  %sxy = mul i32 %sx, %sy
  %n = mul i32 %sxy, %sz
  store volatile i32 %n, ptr @loom_cpu.n
  %gxy = mul i32 %gx, %gy
  %groups = mul i32 %gxy, %gz
  %none = icmp eq i32 %groups, 0
  br i1 %none, label %finished, label %group

group:                                   ; one workgroup: %g is its linear id
  %g = phi i32 [ 0, %entry ], [ %gnext, %group_done ]
  %x = urem i32 %g, %gx
  %gq = udiv i32 %g, %gx
  %y = urem i32 %gq, %gy
  %z = udiv i32 %gq, %gy
  store volatile i32 %x, ptr @loom_cpu.group
  %py = getelementptr i32, ptr @loom_cpu.group, i32 1
  store volatile i32 %y, ptr %py
  %pz = getelementptr i32, ptr @loom_cpu.group, i32 2
  store volatile i32 %z, ptr %pz
  br i1 %fibers, label %fiber_init, label %loop

loop:                                    ; no barriers: invocations in order
  %li = phi i32 [ 0, %group ], [ %lnext, %loop ]
  store volatile i32 %li, ptr @loom_cpu.cur
  call void %kernel(ptr %kernarg)
  %lnext = add i32 %li, 1
  %lmore = icmp ult i32 %lnext, %n
  br i1 %lmore, label %loop, label %group_done

fiber_init:                              ; a fresh stack frame per invocation
  %fi = phi i32 [ 0, %group ], [ %fnext, %fiber_init ]
  %fi64 = zext i32 %fi to i64
  %fnext64 = add i64 %fi64, 1
  %topoff = mul i64 %fnext64, %stack_bytes
  %top = getelementptr i8, ptr %stacks, i64 %topoff
  ; (low to high) r15 r14 r13 r12 rbx rbp return-address, the return slot 8 below the 16-aligned top
  %frame = getelementptr i8, ptr %top, i64 -56
  %r13 = getelementptr i8, ptr %frame, i64 16
  store ptr @loom_cpu.fiber_main, ptr %r13
  %r12 = getelementptr i8, ptr %frame, i64 24
  store i64 %fi64, ptr %r12
  %ret = getelementptr i8, ptr %frame, i64 48
  store ptr @loom_cpu_fiber_start, ptr %ret
  %spp = getelementptr [1024 x ptr], ptr @loom_cpu.sp, i32 0, i32 %fi
  store volatile ptr %frame, ptr %spp
  %dp = getelementptr [1024 x i8], ptr @loom_cpu.done, i32 0, i32 %fi
  store volatile i8 0, ptr %dp
  %fnext = add i32 %fi, 1
  %fmore = icmp ult i32 %fnext, %n
  br i1 %fmore, label %fiber_init, label %reset

reset:
  call void @llvm.memset.p0.i64(ptr @loom_cpu.wg, i8 0, i64 8, i1 true)
  call void @llvm.memset.p0.i64(ptr @loom_cpu.sg, i8 0, i64 8192, i1 true)
  br label %pass

pass:                                    ; resume every unfinished fiber once
  store volatile i32 0, ptr @loom_cpu.progress
  br label %resume

resume:
  %ri = phi i32 [ 0, %pass ], [ %rnext, %next ]
  %live = phi i32 [ 0, %pass ], [ %live2, %next ]
  %rdp = getelementptr [1024 x i8], ptr @loom_cpu.done, i32 0, i32 %ri
  %rd = load volatile i8, ptr %rdp
  %isdone = icmp ne i8 %rd, 0
  br i1 %isdone, label %next, label %run

run:
  store volatile i32 %ri, ptr @loom_cpu.cur
  %rspp = getelementptr [1024 x ptr], ptr @loom_cpu.sp, i32 0, i32 %ri
  %rsp = load volatile ptr, ptr %rspp
  call void @loom_cpu_switch(ptr @loom_cpu.sched, ptr %rsp)
  br label %next

next:
  %ran = phi i32 [ 0, %resume ], [ 1, %run ]
  %live2 = add i32 %live, %ran
  %rnext = add i32 %ri, 1
  %rmore = icmp ult i32 %rnext, %n
  br i1 %rmore, label %resume, label %passed

passed:
  %anylive = icmp ne i32 %live2, 0
  br i1 %anylive, label %check, label %group_done

check:
  %prog = load volatile i32, ptr @loom_cpu.progress
  %stuck = icmp eq i32 %prog, 0
  br i1 %stuck, label %deadlock, label %pass

group_done:
  %gnext = add i32 %g, 1
  %gmore = icmp ult i32 %gnext, %groups
  br i1 %gmore, label %group, label %finished

finished:
  ret i32 0

deadlock:
  ret i32 1
}

declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define float @__extendhfsf2(half %h) {
entry:
  %x = bitcast half %h to i16
  %w = zext i16 %x to i32
  %sign = and i32 %w, 32768
  %sbit = shl i32 %sign, 16
  %e = lshr i32 %w, 10
  %exp = and i32 %e, 31
  %mant = and i32 %w, 1023
  %m13 = shl i32 %mant, 13
  %isspecial = icmp eq i32 %exp, 31
  br i1 %isspecial, label %special, label %finite
special:
  %sp = or i32 %m13, 2139095040
  br label %done
finite:
  %iszero = icmp eq i32 %exp, 0
  br i1 %iszero, label %small, label %normal
normal:
  %e2 = add i32 %exp, 112
  %e3 = shl i32 %e2, 23
  %nm = or i32 %e3, %m13
  br label %done
small:                                   ; zero or subnormal: mant * 2^-24, exact
  %mf = uitofp i32 %mant to float
  %sv = fmul float %mf, 0x3E70000000000000
  %sb = bitcast float %sv to i32
  br label %done
done:
  %mag = phi i32 [ %sp, %special ], [ %nm, %normal ], [ %sb, %small ]
  %bits = or i32 %mag, %sbit
  %f = bitcast i32 %bits to float
  ret float %f
}

define half @__truncsfhf2(float %f) {
entry:
  %x = bitcast float %f to i32
  %s = lshr i32 %x, 16
  %sign = and i32 %s, 32768
  %a = and i32 %x, 2147483647
  %big = icmp uge i32 %a, 1199570944       ; 65536.0: infinity, or infinity and NaN
  br i1 %big, label %special, label %finite
special:
  %isnan = icmp ugt i32 %a, 2139095040
  %p = lshr i32 %a, 13
  %pm = and i32 %p, 1023
  %q = or i32 %pm, 32256                   ; 0x7e00: quiet
  %nan = select i1 %isnan, i32 %q, i32 31744
  br label %done
finite:
  %sub = icmp ult i32 %a, 947912704        ; 2^-14: a half subnormal or zero
  br i1 %sub, label %small, label %normal
small:                                     ; |f| + 0.5: the sum's ulp is 2^-24, one rounding
  %af = bitcast i32 %a to float
  %sum = fadd float %af, 5.000000e-01
  %sumb = bitcast float %sum to i32
  %sm = sub i32 %sumb, 1056964608
  br label %done
normal:
  %odd0 = lshr i32 %a, 13
  %odd = and i32 %odd0, 1
  %b1 = add i32 %a, -939520001             ; rebias (15 - 127) << 23, plus 0xfff
  %b2 = add i32 %b1, %odd
  %nb = lshr i32 %b2, 13
  br label %done
done:
  %mag = phi i32 [ %nan, %special ], [ %sm, %small ], [ %nb, %normal ]
  %bits = or i32 %mag, %sign
  %t = trunc i32 %bits to i16
  %h = bitcast i16 %t to half
  ret half %h
}

define half @__truncdfhf2(double %d) {
entry:
  %x = bitcast double %d to i64
  %s = lshr i64 %x, 48
  %sign = and i64 %s, 32768
  %a = and i64 %x, 9223372036854775807
  %big = icmp uge i64 %a, 4679240012837945344      ; 65536.0
  br i1 %big, label %special, label %finite
special:
  %isnan = icmp ugt i64 %a, 9218868437227405312
  %p = lshr i64 %a, 42
  %pm = and i64 %p, 1023
  %q = or i64 %pm, 32256
  %nan = select i1 %isnan, i64 %q, i64 31744
  br label %done
finite:
  %sub = icmp ult i64 %a, 4544132024016830464      ; 2^-14
  br i1 %sub, label %small, label %normal
small:                                             ; |d| + 2^28: the sum's ulp is 2^-24
  %af = bitcast i64 %a to double
  %sum = fadd double %af, 0x41B0000000000000
  %sumb = bitcast double %sum to i64
  %sm = sub i64 %sumb, 4733283208366391296
  br label %done
normal:
  %odd0 = lshr i64 %a, 42
  %odd = and i64 %odd0, 1
  %b1 = add i64 %a, -4539626225366204417           ; rebias (15 - 1023) << 52, plus 2^41 - 1
  %b2 = add i64 %b1, %odd
  %nb = lshr i64 %b2, 42
  br label %done
done:
  %mag = phi i64 [ %nan, %special ], [ %sm, %small ], [ %nb, %normal ]
  %bits = or i64 %mag, %sign
  %t = trunc i64 %bits to i16
  %h = bitcast i16 %t to half
  ret half %h
}
"""
