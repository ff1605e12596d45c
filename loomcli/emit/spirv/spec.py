"""SPIR-V numbers the emitter uses (SPIR-V 1.6 unified spec, GLSL.std.450).

Only what the emitter needs, as plain integer constants grouped by operand
kind. Names follow the specification without their `Op`/kind prefixes.
"""

from __future__ import annotations

MAGIC = 0x07230203
GENERATOR = 0  # no registered generator id


class Op:
    Nop = 0
    Undef = 1
    Name = 5
    Extension = 10
    ExtInstImport = 11
    ExtInst = 12
    MemoryModel = 14
    EntryPoint = 15
    ExecutionMode = 16
    Capability = 17
    TypeVoid = 19
    TypeBool = 20
    TypeInt = 21
    TypeFloat = 22
    TypeVector = 23
    TypeArray = 28
    TypeRuntimeArray = 29
    TypeStruct = 30
    TypePointer = 32
    TypeFunction = 33
    ConstantTrue = 41
    ConstantFalse = 42
    Constant = 43
    ConstantComposite = 44
    Function = 54
    FunctionParameter = 55
    FunctionEnd = 56
    FunctionCall = 57
    Variable = 59
    Load = 61
    Store = 62
    AccessChain = 65
    Decorate = 71
    MemberDecorate = 72
    CompositeConstruct = 80
    CompositeExtract = 81
    ConvertFToU = 109
    ConvertFToS = 110
    ConvertSToF = 111
    ConvertUToF = 112
    UConvert = 113
    SConvert = 114
    FConvert = 115
    Bitcast = 124
    SNegate = 126
    FNegate = 127
    IAdd = 128
    FAdd = 129
    ISub = 130
    FSub = 131
    IMul = 132
    FMul = 133
    UDiv = 134
    SDiv = 135
    FDiv = 136
    UMod = 137
    SRem = 138
    IAddCarry = 149
    UMulExtended = 151
    IsNan = 156
    IsInf = 157
    LogicalEqual = 164
    LogicalNotEqual = 165
    LogicalOr = 166
    LogicalAnd = 167
    LogicalNot = 168
    Select = 169
    IEqual = 170
    INotEqual = 171
    UGreaterThan = 172
    SGreaterThan = 173
    UGreaterThanEqual = 174
    SGreaterThanEqual = 175
    ULessThan = 176
    SLessThan = 177
    ULessThanEqual = 178
    SLessThanEqual = 179
    FOrdEqual = 180
    FUnordEqual = 181
    FOrdNotEqual = 182
    FUnordNotEqual = 183
    FOrdLessThan = 184
    FUnordLessThan = 185
    FOrdGreaterThan = 186
    FUnordGreaterThan = 187
    FOrdLessThanEqual = 188
    FUnordLessThanEqual = 189
    FOrdGreaterThanEqual = 190
    FUnordGreaterThanEqual = 191
    ShiftRightLogical = 194
    ShiftRightArithmetic = 195
    ShiftLeftLogical = 196
    BitwiseOr = 197
    BitwiseXor = 198
    BitwiseAnd = 199
    Not = 200
    ControlBarrier = 224
    MemoryBarrier = 225
    AtomicLoad = 227
    AtomicStore = 228
    AtomicExchange = 229
    AtomicCompareExchange = 230
    AtomicIAdd = 234
    AtomicISub = 235
    AtomicSMin = 236
    AtomicUMin = 237
    AtomicSMax = 238
    AtomicUMax = 239
    AtomicAnd = 240
    AtomicOr = 241
    AtomicXor = 242
    Phi = 245
    LoopMerge = 246
    SelectionMerge = 247
    Label = 248
    Branch = 249
    BranchConditional = 250
    Switch = 251
    Return = 253
    ReturnValue = 254
    Unreachable = 255
    GroupNonUniformElect = 333
    GroupNonUniformAll = 334
    GroupNonUniformAny = 335
    GroupNonUniformIAdd = 349
    GroupNonUniformFAdd = 350
    GroupNonUniformIMul = 351
    GroupNonUniformFMul = 352
    GroupNonUniformSMin = 353
    GroupNonUniformUMin = 354
    GroupNonUniformFMin = 355
    GroupNonUniformSMax = 356
    GroupNonUniformUMax = 357
    GroupNonUniformFMax = 358
    GroupNonUniformBitwiseAnd = 359
    GroupNonUniformBitwiseOr = 360
    GroupNonUniformBitwiseXor = 361
    GroupNonUniformLogicalAnd = 362
    GroupNonUniformLogicalOr = 363
    GroupNonUniformLogicalXor = 364
    AtomicFAddEXT = 6035


class Cap:
    Shader = 1
    Float16 = 9
    Float64 = 10
    Int64 = 11
    Int64Atomics = 12
    Int16 = 22
    Int8 = 39
    GroupNonUniform = 61
    GroupNonUniformVote = 62
    GroupNonUniformArithmetic = 63
    StorageBuffer16BitAccess = 4433
    StorageBuffer8BitAccess = 4448
    SignedZeroInfNanPreserve = 4466
    AtomicFloat32AddEXT = 6033


class SC:  # storage classes
    Input = 1
    Workgroup = 4
    Private = 6
    Function = 7
    PushConstant = 9
    StorageBuffer = 12


class Dec:
    Block = 2
    ArrayStride = 6
    BuiltIn = 11
    Aliased = 20
    Binding = 33
    DescriptorSet = 34
    Offset = 35
    NoContraction = 42


class BuiltIn:
    NumWorkgroups = 24
    WorkgroupId = 26
    LocalInvocationId = 27
    GlobalInvocationId = 28
    SubgroupSize = 36
    NumSubgroups = 38
    SubgroupId = 40
    SubgroupLocalInvocationId = 41


class Scope:
    Device = 1
    Workgroup = 2
    Subgroup = 3


class Sem:  # memory semantics bits
    Relaxed = 0x0
    Acquire = 0x2
    Release = 0x4
    AcquireRelease = 0x8
    UniformMemory = 0x40
    WorkgroupMemory = 0x100


class GLSL:  # GLSL.std.450 extended instruction numbers
    FAbs = 4
    Floor = 8
    Ceil = 9
    Sin = 13
    Cos = 14
    Tanh = 21
    Pow = 26
    Exp = 27
    Log = 28
    Exp2 = 29
    Log2 = 30
    Sqrt = 31
    InverseSqrt = 32
    Fma = 50
    FrexpStruct = 52
    Ldexp = 53
    RoundEven = 2


GLCOMPUTE = 5
EXEC_LOCAL_SIZE = 17
EXEC_SIGNED_ZERO_INF_NAN_PRESERVE = 4461  # SPV_KHR_float_controls, core in SPIR-V 1.4
ADDRESSING_LOGICAL = 0
MEMORY_GLSL450 = 1
GROUP_REDUCE = 0
