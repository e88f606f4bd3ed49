"""The dtype of every op's outputs, as TensorFlow's OpDefs declare them, read with a node's attrs.

TensorFlow knows each tensor's dtype from its op's definition: an output arg is of a fixed type
(``Equal``'s is ``bool``), of the type an attr names (``AddV2``'s ``T``, ``Cast``'s ``DstT``), of a list of
types (``IdentityN``'s ``T``), or repeated ``N`` times (``Split``'s ``T * num_split``). A GraphDef carries the
attrs, not the definitions: the table below is the definitions' output args for every op poolserve has a
kernel for (``tools/make_op_types.py`` writes it from TensorFlow; a test checks that no kernel is missing).
``Session.run`` converts a value fed for any tensor to that tensor's dtype with it, as TensorFlow does.
"""

from __future__ import annotations

from poolserve.proto import types_pb2
from poolserve.runtime.node import Node

# An output arg: (a DataType, or the attr naming one or a list of them; whether it is a list; the attr
# giving how many times the arg repeats, or ""; the type attr's default, or 0)
_Arg = tuple[int | str, bool, str, int]

# --- begin: written by tools/make_op_types.py from TensorFlow's OpDefs; do not edit ---
# TensorFlow 2.21.0: output args -> the ops that have them
_BY_SPEC = {
    "T": (
        "Abs Acos Acosh Add AddN AddV2 Asin Asinh Assign AssignAdd AssignSub Atan Atan2 Atanh AvgPool "
        "AvgPool3D BatchMatMul BatchMatMulV2 BatchNormWithGlobalNormalization BatchToSpace BatchToSpaceND "
        "BesselI0 BesselI0e BesselI1 BesselI1e BesselJ0 BesselJ1 BesselK0 BesselK0e BesselK1 BesselK1e "
        "BesselY0 BesselY1 Betainc BiasAdd BiasAddV1 Bincount BitwiseAnd BitwiseOr BitwiseXor BroadcastTo "
        "Ceil CheckNumerics CheckNumericsV2 Cholesky ClipByValue Concat ConcatV2 Conv2D "
        "Conv2DBackpropInput Conv3D Conv3DBackpropInput Conv3DBackpropInputV2 Cos Cosh Cross Cumprod "
        "Cumsum CumulativeLogsumexp Dawsn DenseBincount DepthToSpace DepthwiseConv2dNative Diag DiagPart "
        "Digamma Dilation2D Div DivNoNan DynamicStitch Einsum Elu EnsureShape Enter Erf Erfc Erfinv "
        "EuclideanNorm Exit Exp ExpandDims Expint Expm1 ExtractImagePatches Fill Floor FloorDiv FloorMod "
        "FresnelCos FresnelSin Identity Igamma Igammac Inv Invert L2Loss LeftShift Lgamma LinSpace Log "
        "Log1p LogSoftmax MatMul MatrixBandPart MatrixDeterminant MatrixDiag MatrixDiagPart "
        "MatrixDiagPartV2 MatrixDiagPartV3 MatrixDiagV2 MatrixDiagV3 MatrixInverse MatrixLogarithm "
        "MatrixSetDiag MatrixSetDiagV2 MatrixSetDiagV3 MatrixSolve MatrixSquareRoot MatrixTriangularSolve "
        "Max MaxPool3D Maximum Mean Min Minimum MirrorPad Mul MulNoNan Ndtri Neg NextIteration OneHot "
        "OnesLike Pack Pad PadV2 ParallelDynamicStitch Polygamma Pow PreventGradient Print Prod "
        "QuantizeAndDequantizeV2 QuantizeAndDequantizeV3 QuantizeAndDequantizeV4 RaggedBincount "
        "RaggedTensorToTensor RandomShuffle RealDiv Reciprocal RefEnter RefExit RefNextIteration Relu "
        "Relu6 Reshape ResizeNearestNeighbor Reverse ReverseSequence ReverseV2 RightShift Rint Roll Round "
        "Rsqrt ScatterNd SegmentMax SegmentMean SegmentMin SegmentProd SegmentSum Select SelectV2 Selu "
        "Sigmoid Sign Sin Sinh Slice Snapshot Softmax Softplus Softsign SpaceToBatch SpaceToBatchND "
        "SpaceToDepth SparseReduceMax SparseReduceSum SparseSegmentMean SparseSegmentMeanWithNumSegments "
        "SparseSegmentSqrtN SparseSegmentSqrtNWithNumSegments SparseSegmentSum "
        "SparseSegmentSumWithNumSegments SparseSoftmax SparseTensorDenseMatMul SparseToDense Spence Sqrt "
        "Square SquaredDifference Squeeze StatelessShuffle StopGradient StridedSlice Sub Sum Tan Tanh "
        "TensorScatterAdd TensorScatterMax TensorScatterMin TensorScatterSub TensorScatterUpdate Tile "
        "Transpose TridiagonalSolve TruncateDiv TruncateMod UnsortedSegmentMax UnsortedSegmentMin "
        "UnsortedSegmentProd UnsortedSegmentSum Xdivy Xlog1py Xlogy ZerosLike Zeta _FusedConv2D "
        "_FusedDepthwiseConv2dNative _FusedMatMul"
    ),
    "DT_BOOL": (
        "All Any ApproximateEqual Equal Greater GreaterEqual InTopK InTopKV2 IsFinite IsInf IsNan "
        "IsVariableInitialized Less LessEqual LogicalAnd LogicalNot LogicalOr LoopCond NotEqual "
        "OptionalHasValue RegexFullMatch StaticRegexFullMatch VarIsInitializedOp"
    ),
    "DT_STRING": (
        "AsString DecodeBase64 DecodeCompressed DecodeJSONExample EncodeBase64 EncodePng EncodeWav "
        "ReduceJoin RegexReplace SerializeTensor StaticRegexReplace StringFormat StringJoin StringLower "
        "StringStrip StringUpper Substr UnicodeEncode UnicodeTranscode UnsortedSegmentJoin"
    ),
    "dtype": (
        "Const Empty ImageProjectiveTransformV2 ImageProjectiveTransformV3 Placeholder "
        "PlaceholderWithDefault RandomStandardNormal RandomUniform ReadVariableOp ResourceGather "
        "StatelessParameterizedTruncatedNormal StatelessRandomGammaV2 StatelessRandomGammaV3 "
        "StatelessRandomPoisson StatelessRandomUniformInt StatelessRandomUniformIntV2 TensorArrayGatherV3 "
        "TensorArrayReadV3 TruncatedNormal VariableV2"
    ),
    "": (
        "Assert AssignAddVariableOp AssignSubVariableOp AssignVariableOp ControlTrigger "
        "InitializeTableFromTextFileV2 InitializeTableV2 LookupTableImportV2 LookupTableInsertV2 "
        "LookupTableRemoveV2 NoOp PrintV2 TensorArrayCloseV3"
    ),
    "DT_FLOAT": (
        "AudioSpectrogram CropAndResize FakeQuantWithMinMaxArgs FakeQuantWithMinMaxVars "
        "FakeQuantWithMinMaxVarsPerChannel Mfcc ResizeArea ResizeBicubic ResizeBilinear ScaleAndTranslate "
        "TensorArrayScatterV3 TensorArraySplitV3 TensorArrayWriteV3"
    ),
    "DT_VARIANT": (
        "EmptyTensorList OptionalFromValue OptionalNone RaggedTensorToVariant TensorListFromTensor "
        "TensorListPushBack TensorListReserve TensorListResize TensorListScatter "
        "TensorListScatterIntoExistingList TensorListScatterV2 TensorListSetItem TensorListSplit"
    ),
    "DT_INT32": (
        "Bucketize NonMaxSuppression NonMaxSuppressionV2 NonMaxSuppressionV3 "
        "NonMaxSuppressionWithOverlaps Rank SetSize StatelessRandomGetAlg StringLength TensorArraySizeV3 "
        "TensorListLength UnicodeScript"
    ),
    "T=DT_FLOAT": (
        "AdjustContrastv2 AdjustHue AdjustSaturation DrawBoundingBoxes DrawBoundingBoxesV2 HSVToRGB LRN "
        "LeakyRelu MaxPool MaxPoolV2 NextAfter RGBToHSV"
    ),
    "Tcomplex=DT_COMPLEX64": "FFT FFT2D FFT3D IFFT IFFT2D IFFT3D RFFT RFFT2D RFFT3D",
    "DT_INT64,T,DT_INT64": (
        "DenseToDenseSetOperation DenseToSparseSetOperation RaggedTensorToSparse SparseAdd SparseConcat "
        "SparseReduceMaxSparse SparseReduceSumSparse SparseSlice"
    ),
    "T,T": (
        "LogMatrixDeterminant Qr RefSwitch SelfAdjointEigV2 SoftmaxCrossEntropyWithLogits "
        "SparseSoftmaxCrossEntropyWithLogits Switch"
    ),
    "dtype=DT_FLOAT": (
        "Dequantize StatelessRandomNormal StatelessRandomNormalV2 StatelessRandomUniform "
        "StatelessRandomUniformV2 StatelessTruncatedNormal StatelessTruncatedNormalV2"
    ),
    "DT_UINT8": "DecodeAndCropJpeg DecodeBmp DecodeGif DecodeJpeg Fingerprint PopulationCount",
    "[Tout]": "Case If PartitionedCall StatefulPartitionedCall StatelessCase StatelessIf",
    "DT_INT64": "LookupTableSizeV2 StringToHashBucket StringToHashBucketFast StringToHashBucketStrong Where",
    "DT_RESOURCE": "HashTableV2 MutableDenseHashTableV2 MutableHashTableV2 VarHandleOp",
    "Tout=DT_FLOAT": "Angle ComplexAbs Imag Real",
    "out_type=DT_INT32": "LowerBound Shape Size UpperBound",
    "DT_INT64,DT_STRING,DT_INT64": "SparseCrossV2 StringSplit StringSplitV2",
    "DT_INT64,T": "SparseReorder SparseSparseMaximum SparseSparseMinimum",
    "DT_INT64,output_type,DT_INT64": "DenseCountSparseOutput RaggedCountSparseOutput SparseCountSparseOutput",
    "T,DT_INT32": "ApproxTopK Merge RefMerge",
    "T,out_idx=DT_INT32": "ListDiff Unique UniqueV2",
    "Tout": "BatchMatMulV3 LookupTableFindV2 RandomUniformInt",
    "Tparams": "Gather GatherNd GatherV2",
    "Treal=DT_FLOAT": "IRFFT IRFFT2D IRFFT3D",
    "[T]": "IdentityN StatelessWhile While",
    "dtype=DT_UINT8": "DecodeImage DecodePng DecodeWebP",
    "element_dtype": "TensorListGather TensorListGetItem TensorListStack",
    "out_type": "DecodePaddedRaw DecodeRaw ParseTensor",
    "T*num_split": "Split SplitV",
    "T,DT_INT64,DT_INT64": "FractionalAvgPool FractionalMaxPool",
    "T,out_idx=DT_INT32,out_idx=DT_INT32": "UniqueWithCounts UniqueWithCountsV2",
    "Tidx=DT_INT32": "Range UnravelIndex",
    "dtype=DT_UINT64": "StatelessRandomUniformFullInt StatelessRandomUniformFullIntV2",
    "element_dtype,DT_INT64": "TensorListConcat TensorListConcatV2",
    "output_dtype=DT_INT64": "Multinomial StatelessMultinomial",
    "output_type=DT_INT64": "ArgMax ArgMin",
    "DT_FLOAT,DT_FLOAT,DT_FLOAT,DT_INT32": "CombinedNonMaxSuppression",
    "DT_FLOAT,DT_INT32": "DecodeWav",
    "DT_INT32,DT_INT32": "NonMaxSuppressionV4",
    "DT_INT32,T=DT_FLOAT,DT_INT32": "NonMaxSuppressionV5",
    "DT_INT64*Nsparse,[sparse_types],DT_INT64*Nsparse,[Tdense]": "ParseExample",
    "DT_INT64*num_sparse,[sparse_types],DT_INT64*num_sparse,[Tdense]": "ParseSingleExample",
    (
        "DT_INT64*num_sparse,[sparse_types],DT_INT64*num_sparse,[Tdense],[ragged_value_types],"
        "[ragged_split_types]"
    ): "ParseExampleV2",
    "DT_INT64*top_paths,DT_INT64*top_paths,DT_INT64*top_paths,T=DT_FLOAT": "CTCBeamSearchDecoder",
    "DT_INT64,DT_INT64": "SparseReshape",
    "DT_INT64,DT_INT64,DT_INT64": "SparseCrossHashed",
    "DT_INT64,DT_INT64,DT_INT64,T=DT_FLOAT": "CTCGreedyDecoder",
    "DT_INT64,T,DT_BOOL,DT_INT64": "SparseFillEmptyRows",
    "DT_INT64,out_type,DT_INT64": "SparseCross",
    "DT_RESOURCE,DT_FLOAT": "TensorArrayV3",
    "DT_STRING,Tsplits=DT_INT64": "StringNGrams",
    "DT_UINT64,DT_UINT64": "StatelessRandomGetKeyCounter",
    "DT_VARIANT,element_dtype": "TensorListPopBack",
    "DstT": "Cast",
    "T*num": "Unpack",
    "T*num_outs": "_SwitchN",
    "T*num_partitions": "DynamicPartition",
    "T,DT_FLOAT,DT_FLOAT": "QuantizeV2",
    "T,T,T": "Svd",
    "T,T,T,T,T": "FusedBatchNorm",
    "T,Targmax=DT_INT64": "MaxPoolWithArgmax",
    "T,U,U,U,U": "FusedBatchNormV2",
    "T,U,U,U,U,U": "FusedBatchNormV3",
    "T,index_type=DT_INT32": "TopKV2",
    "T,output_idx_type=DT_INT32": "Lu",
    "T=DT_COMPLEX64": "Conj",
    "T=DT_INT32": "BroadcastArgs",
    "Tkeys,Tvalues": "LookupTableExportV2",
    "Tout,Tout": "Eig",
    "Tout=DT_COMPLEX64": "Complex",
    "Tsplits=DT_INT64*OUTPUT_RAGGED_RANK,Tvalues": "RaggedGather",
    "Tsplits=DT_INT64*output_ragged_rank,Tvalues": "RaggedTensorFromVariant",
    "Tsplits=DT_INT64,DT_INT32": "UnicodeDecode",
    "Tsplits=DT_INT64,DT_INT32,DT_INT64": "UnicodeDecodeWithOffsets",
    "Tsplits=DT_INT64,T=DT_INT32": "RaggedRange",
    "[OUT_TYPE]": "DecodeCSV",
    "[dtypes]": "RestoreV2",
    "[output_types]": "OptionalGetValue",
    "dtype,DT_INT64": "TensorArrayConcatV3",
    "dtype=DT_INT32": "HistogramFixedWidth",
    "dtype=DT_INT64": "StatelessRandomBinomial",
    "out_type=DT_FLOAT": "StringToNumber",
    "out_type=DT_INT32*N": "ShapeN",
    "output_type=DT_INT32": "ExtractJpegShape",
    "shape_type": "TensorListElementShape",
    "type": "Bitcast",
}
# --- end: written by tools/make_op_types.py ---

# poolserve's own fused ops, which TensorFlow does not register (runtime/kernels/fused_ops.py)
_OWN = {"_FusedBatchMatMulV2": "T", "_FusedLayerNorm": "T"}


def _parse(spec: str) -> tuple[_Arg, ...]:
    """``"T,out_idx=DT_INT32"`` -> ``(("T", False, "", 0), ("out_idx", False, "", DT_INT32))``."""
    args: list[_Arg] = []
    for text in spec.split(",") if spec else ():
        text, _, count = text.partition("*")
        kind, _, default = text.partition("=")
        is_list = kind.startswith("[")
        name = kind.strip("[]")
        fixed = types_pb2.DataType.Value(name) if name.startswith("DT_") else name
        args.append((fixed, is_list, count, types_pb2.DataType.Value(default) if default else 0))
    return tuple(args)


OUTPUTS: dict[str, tuple[_Arg, ...]] = {
    op: _parse(spec)
    for spec, ops in list(_BY_SPEC.items()) + [(s, op) for op, s in _OWN.items()]
    for op in ops.split()
}


def output_dtype(node: Node, port: int) -> int | None:
    """The DataType of ``node``'s output ``port`` (reference types as their value type), or None when
    the table does not know the op or the node lacks an attr its definition reads (and gives no default
    for)."""
    args = OUTPUTS.get(node.op)
    if args is None:
        return None
    attrs = node.attrs
    for kind, is_list, count, default in args:
        if is_list:
            if not isinstance(kind, str) or kind not in attrs:
                return None
            types = attrs[kind].list.type
            if port < len(types):
                return int(types[port])
            port -= len(types)
            continue
        if count:
            if count not in attrs:
                return None
            n = int(attrs[count].i)
        else:
            n = 1
        if port < n:
            if isinstance(kind, int):
                return kind
            if kind not in attrs or attrs[kind].WhichOneof("value") != "type":
                return default or None
            code = int(attrs[kind].type)
            return code - 100 if code > 100 else code  # DT_FLOAT_REF -> DT_FLOAT
        port -= n
    return None
