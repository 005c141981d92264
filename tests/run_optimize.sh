#!/bin/sh
# graphfuse optimize on the bundled Llama and GPT-2 models (legacy and dynamo
# exports): every RMSNorm / LayerNorm (with its residual Add) and every
# activation is fused, the optimized file still matches PyTorch's recorded
# outputs (graphfuse test --atol 1e-5), a second optimize changes nothing;
# bad input exits 2 leaving no output file.  Usage: tests/run_optimize.sh GRAPHFUSE
set -u
gf=${1:?usage: run_optimize.sh path/to/graphfuse}
. "$(dirname "$0")/cli_checks.sh"

bad() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

# the "after" count of op DOMAIN.OP in a JSON report (0 when absent)
after() {
    v=$(sed -n "s/.*{\"op\": \"$3\", \"domain\": \"$2\", \"before\": [0-9]*, \"after\": \([0-9]*\)}.*/\1/p" "$1")
    echo "${v:-0}"
}
hits() {
    sed -n "s/.*{\"name\": \"$2\", \"hits\": \([0-9]*\),.*/\1/p" "$1"
}
# check_eq DESCRIPTION GOT WANT
check_eq() {
    n=$((n + 1))
    [ "$2" = "$3" ] || bad "$1: $2, expected $3"
}

for m in llama_tiny/legacy llama_tiny/dynamo gpt2_tiny/legacy gpt2_tiny/dynamo; do
    name=$(echo "$m" | tr / _)
    dir="$tmp/$name"
    mkdir -p "$dir"
    rep="$dir/report.json"
    expect 0 "optimize $m" -- "$gf" optimize "models/$m/model.onnx" -o "$dir/model.onnx" \
        --report json || continue
    cp "$tmp/out" "$rep"
    case $m in
    llama_tiny/*)
        # 5 RMSNorms: the first on the embedding, 4 after a residual Add
        check_eq "$m RMSNorm" "$(after "$rep" graphfuse RMSNorm)" 1
        check_eq "$m AddRMSNorm" "$(after "$rep" graphfuse AddRMSNorm)" 4
        check_eq "$m SwiGLU" "$(after "$rep" graphfuse SwiGLU)" 2
        check_eq "$m rmsnorm hits" "$(hits "$rep" rmsnorm)" 5
        check_eq "$m rmsnorm_weight hits" "$(hits "$rep" rmsnorm_weight)" 5
        check_eq "$m add_rmsnorm hits" "$(hits "$rep" add_rmsnorm)" 4
        check_eq "$m swiglu hits" "$(hits "$rep" swiglu)" 2
        for op in Pow ReduceMean Sqrt Reciprocal Sigmoid; do
            check_eq "$m $op left" "$(after "$rep" "" $op)" 0
        done
        ;;
    gpt2_tiny/*)
        # 5 LayerNorms: the first after the (broadcasting) embedding sum,
        # 4 after a residual Add; 2 tanh GELUs
        check_eq "$m LayerNorm" "$(after "$rep" graphfuse LayerNorm)" 1
        check_eq "$m AddLayerNorm" "$(after "$rep" graphfuse AddLayerNorm)" 4
        check_eq "$m gelu hits" "$(hits "$rep" gelu)" 2 # then into MatMulEpilogue
        check_eq "$m layernorm hits" "$(hits "$rep" layernorm)" 5
        check_eq "$m add_layernorm hits" "$(hits "$rep" add_layernorm)" 4
        for op in LayerNormalization Tanh Pow Mul; do
            check_eq "$m $op left" "$(after "$rep" "" $op)" 0
        done
        ;;
    esac
    # the optimized file against PyTorch's outputs
    cp -r "models/$m/test_data_set_0" "$dir/"
    if expect 0 "test $m optimized" -- "$gf" test --atol 1e-5 "$dir"; then
        n=$((n + 1))
        grep -q "^PASS" "$tmp/out" || { bad "test $m optimized: $(head -1 "$tmp/out")"; }
    fi
    # optimizing again finds nothing and adds no function
    if expect 0 "optimize $m twice" -- "$gf" optimize "$dir/model.onnx" -o "$dir/again.onnx" \
        --report json; then
        n=$((n + 1))
        grep -q '"functions_added": 0' "$tmp/out" || bad "optimize $m twice added functions"
        grep -q '"hits": [1-9]' "$tmp/out" && bad "optimize $m twice fused again"
    fi
done

# test --fuse: the same optimization in memory
if expect 0 "test --fuse" -- "$gf" test --fuse --atol 1e-5 models/llama_tiny/legacy models/gpt2_tiny/dynamo; then
    n=$((n + 1))
    [ "$(grep -c "^PASS" "$tmp/out")" = 2 ] || bad "test --fuse: $(grep -v "^PASS" "$tmp/out" | head -1)"
fi

# the text report: table, sizes, hits; --explain; --disable
m=models/llama_tiny/dynamo/model.onnx
if expect 0 "text report" -- "$gf" optimize $m -o "$tmp/t.onnx" --explain rmsnorm; then
    for s in "graphfuse.AddRMSNorm" "file size (bytes)" "explain rmsnorm" "matched form"; do
        n=$((n + 1))
        grep -qF "$s" "$tmp/out" || bad "text report: '$s' missing"
    done
fi
if expect 0 "--disable" -- "$gf" optimize $m -o "$tmp/d.onnx" --disable rmsnorm,swiglu --report json; then
    check_eq "--disable rmsnorm" "$(after "$tmp/out" graphfuse AddRMSNorm)" 0
    check_eq "--disable keeps Pow" "$(after "$tmp/out" "" Pow)" 5
    check_eq "--disable swiglu" "$(after "$tmp/out" graphfuse SwiGLU)" 0
    check_eq "--disable swiglu hits" "$(hits "$tmp/out" swiglu)" 0
    check_eq "--disable keeps silu" "$(hits "$tmp/out" silu)" 2
fi

# bad input: exit 2, one line on stderr, no output file
printf 'garbage' >"$tmp/bad.onnx"
for args in "$tmp/missing.onnx -o $tmp/o1.onnx" \
            "$tmp/bad.onnx -o $tmp/o1.onnx" \
            "$m -o $tmp/o1.onnx --disable rmsnorm,nope" \
            "$m -o $tmp/o1.onnx --target tpu" \
            "$m -o $tmp/o1.onnx --report xml" \
            "$m -o $tmp/o1.onnx --explain nope" \
            "$m -o $tmp/o1.onnx --drop-output nope" \
            "$m -o $tmp/no/such/dir/o1.onnx" \
            "$m"; do
    # shellcheck disable=SC2086 # word splitting of the argument list is wanted
    if expect 2 "optimize $args" -- "$gf" optimize $args; then
        n=$((n + 1))
        [ "$(wc -l <"$tmp/err")" = 1 ] || bad "optimize $args: message is not one line"
    fi
    [ ! -e "$tmp/o1.onnx" ] || { bad "optimize $args left an output file"; rm -f "$tmp/o1.onnx"; }
done
[ -z "$(ls "$tmp" | grep '\.tmp')" ] || bad "temporary files left behind"

# --drop-output: the loss and what only it needed go away
if expect 0 "--drop-output loss" -- "$gf" optimize models/gpt2_tiny/dynamo/model.onnx \
    -o "$tmp/nl.onnx" --drop-output loss --report json; then
    check_eq "--drop-output loss" "$(after "$tmp/out" "" SoftmaxCrossEntropyLoss)" 0
fi

# RoPE and MatMulEpilogue on the files optimized above (whose outputs the
# loop compared with PyTorch's): llama: q and k of both layers are 4 RoPE,
# the scaled q @ k^T of both layers 2 MatMulEpilogue; gpt2: per layer the
# qkv, proj, MLP up (with its tanh GELU) and down linears with their bias
# and the scaled scores, 10; the residual Adds stay with the norms.
for m in llama_tiny/legacy llama_tiny/dynamo gpt2_tiny/legacy gpt2_tiny/dynamo; do
    rep="$tmp/$(echo "$m" | tr / _)/report.json"
    [ -f "$rep" ] || continue
    case $m in
    llama_tiny/*)
        check_eq "$m RoPE" "$(after "$rep" graphfuse RoPE)" 4
        check_eq "$m rope hits" "$(hits "$rep" rope)" 4
        check_eq "$m Neg left" "$(after "$rep" "" Neg)" 0
        check_eq "$m MatMulEpilogue" "$(after "$rep" graphfuse MatMulEpilogue)" 2
        check_eq "$m AddRMSNorm kept" "$(after "$rep" graphfuse AddRMSNorm)" 4
        ;;
    gpt2_tiny/*)
        check_eq "$m MatMulEpilogue" "$(after "$rep" graphfuse MatMulEpilogue)" 10
        check_eq "$m matmul_bias hits" "$(hits "$rep" matmul_bias)" 8
        check_eq "$m matmul_act hits" "$(hits "$rep" matmul_act)" 2
        check_eq "$m Gelu left" "$(after "$rep" graphfuse Gelu)" 0
        check_eq "$m Div left" "$(after "$rep" "" Div)" 0
        check_eq "$m AddLayerNorm kept" "$(after "$rep" graphfuse AddLayerNorm)" 4
        ;;
    esac
done

# --target ort / onnx: the fused ops ONNX Runtime's contrib ops or standard
# ops compute exactly become those ops (the rest stay function calls); the
# files still match PyTorch's recorded outputs in graphfuse (which runs the
# contrib ops and opset-23 ops through its fused kernels).  The models
# import ai.onnx 17 (legacy) and 20 (dynamo): no RMSNormalization or
# RotaryEmbedding (opset 23) for --target onnx, Gelu (20) on dynamo only.
# count_op DUMP OP: nodes of OP ("com.microsoft.X", "graphfuse.X" also as a
# call of a second body X_2, or a standard op) in a text dump
count_op() {
    grep -c ": $2\(_[0-9][0-9]*\)\?(" "$1"
}
# expect_ops DESCRIPTION DUMP OP=COUNT...
expect_ops() {
    desc=$1 dump=$2
    shift 2
    for kv in "$@"; do
        check_eq "$desc ${kv%=*}" "$(count_op "$dump" "${kv%=*}")" "${kv#*=}"
    done
}
for m in llama_tiny/legacy llama_tiny/dynamo gpt2_tiny/legacy gpt2_tiny/dynamo; do
    for target in ort onnx; do
        dir="$tmp/target_$(echo "$m" | tr / _)_$target"
        mkdir -p "$dir"
        expect 0 "optimize $m --target $target" -- "$gf" optimize "models/$m/model.onnx" \
            -o "$dir/model.onnx" --target $target || continue
        cp -r "models/$m/test_data_set_0" "$dir/"
        if expect 0 "test $m --target $target" -- "$gf" test --atol 1e-5 "$dir"; then
            n=$((n + 1))
            grep -q "^PASS" "$tmp/out" || bad "test $m --target $target: $(head -1 "$tmp/out")"
        fi
        expect 0 "dump $m --target $target" -- "$gf" dump "$dir/model.onnx" || continue
        d="$dir/dump.txt"
        cp "$tmp/out" "$d"
        case $m/$target in
        llama_tiny/*/ort)
            expect_ops "$m ort" "$d" SimplifiedLayerNormalization=1 \
                com.microsoft.SkipSimplifiedLayerNormalization=4 com.microsoft.RotaryEmbedding=4 \
                com.microsoft.FusedMatMul=2 graphfuse.SwiGLU=2 graphfuse.SoftmaxCrossEntropy=1 \
                graphfuse.RMSNorm=0 graphfuse.RoPE=0
            n=$((n + 1))
            grep -q "com.microsoft 1" "$d" || bad "$m ort: no com.microsoft opset import"
            ;;
        llama_tiny/*/onnx)
            expect_ops "$m onnx" "$d" graphfuse.RMSNorm=1 graphfuse.AddRMSNorm=4 \
                graphfuse.RoPE=4 graphfuse.MatMulEpilogue=2 RMSNormalization=0 \
                RotaryEmbedding=0
            ;;
        gpt2_tiny/*/ort)
            expect_ops "$m ort" "$d" LayerNormalization=1 \
                com.microsoft.SkipLayerNormalization=4 com.microsoft.FastGelu=2 \
                com.microsoft.FusedMatMul=2 graphfuse.MatMulEpilogue=6 graphfuse.AddLayerNorm=0
            ;;
        gpt2_tiny/legacy/onnx)
            expect_ops "$m onnx" "$d" LayerNormalization=5 Gelu=0 graphfuse.MatMulEpilogue=10 \
                graphfuse.AddLayerNorm=0
            ;;
        gpt2_tiny/dynamo/onnx)
            expect_ops "$m onnx" "$d" LayerNormalization=5 Gelu=2 graphfuse.MatMulEpilogue=8 \
                graphfuse.AddLayerNorm=0
            ;;
        esac
        case $target in
        onnx)
            n=$((n + 1))
            ! grep -q "com\.microsoft" "$d" || bad "$m onnx: com.microsoft ops written"
            ;;
        esac
    done
done

# found by fuzz_optimize (tests/fuzz/regress/): LayerNormalization's Mean
# unused but InvStdDev a graph output; the function body cannot have an
# omitted output before a used one: exit 3 naming it, not a crash
r=tests/fuzz/regress/fuzz_optimize-layernorm-omitted-mean.onnx
expect 3 "a fused node with an omitted middle output" -- "$gf" optimize "$r" -o "$tmp/lnm.onnx" &&
    contains "$tmp/err" "fused LayerNorm: output 1 is omitted but output 2 is used" \
        "omitted middle output message"
[ ! -e "$tmp/lnm.onnx" ] || bad "omitted middle output: an output file was written"
expect 0 "the same with --target ort" -- "$gf" optimize "$r" -o "$tmp/lnm.onnx" --target ort

echo "optimize: $n checks, $fails failed"
[ "$fails" = 0 ]
