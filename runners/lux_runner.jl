# Lux runner for nnbench's line protocol (runners/README.md): seed 000's Lux models, timed as the seed times them.
#
#   julia --project=runners/lux runners/lux_runner.jl --model lenet --ops inference,training \
#       --batch-sizes 2,8,32,128 --precision fp32 --device auto --name Lux [--seconds 30]
#
# Needs Lux, Optimisers, Zygote and BenchmarkTools (plus CUDA and LuxCUDA for a GPU). Prints METADATA lines, then
# per op × batch size a SAMPLES line (every BenchmarkTools sample) and a TIMING line (their median) on stdout;
# progress goes to stderr; a request it can't serve is one line on stderr and exit status 2.
# nnbench's tests do not run this file (there is no Julia in its environment): it is an example, adapted from
# the Lux code of SciMLBenchmarks' "Simple Neural Networks" page.

using Random, Statistics
using Lux, Optimisers, Zygote, BenchmarkTools

fail(message) = (println(stderr, "lux_runner: error: ", message); exit(2))

function options(args)
    opts = Dict("ops" => "inference,training", "precision" => "fp32", "device" => "auto", "name" => "Lux",
                "seconds" => "30")
    isodd(length(args)) && fail("arguments come in pairs: --key value")
    for (k, v) in Iterators.partition(args, 2)
        startswith(k, "--") || fail("unknown argument $k")
        opts[replace(k[3:end], "-" => "_")] = v
    end
    return opts
end

function resnet_block(channels)
    main = Chain(
        Conv((3, 3), channels => channels; pad=1, use_bias=false),
        BatchNorm(channels, relu),
        Conv((3, 3), channels => channels; pad=1, use_bias=false),
        BatchNorm(channels))
    Parallel(+, main, NoOpLayer())
end

# The seed's models (features first: x is 32 × batch, images are W × H × C × batch) and their input sizes.
const MODELS = Dict(
    "mlp_relu" => (() -> Chain(Dense(32, 256, relu), [Dense(256, 256, relu) for _ in 1:5]..., Dense(256, 10)), (32,)),
    "mlp_gelu" => (() -> Chain(Dense(32, 256, gelu), [Dense(256, 256, gelu) for _ in 1:5]..., Dense(256, 10)), (32,)),
    "mlp_batchnorm" => (() -> Chain(
        Dense(32, 256), BatchNorm(256, relu),
        [Chain(Dense(256, 256), BatchNorm(256, relu)) for _ in 1:5]...,
        Dense(256, 10)), (32,)),
    "lenet" => (() -> Chain(
        Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)),
        Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)),
        FlattenLayer(), Dense(256, 120, relu), Dense(120, 84, relu), Dense(84, 10)), (28, 28, 1)),
    "resnet" => (() -> Chain(
        Conv((3, 3), 3 => 64; pad=1, use_bias=false), BatchNorm(64, relu),
        resnet_block(64),
        Conv((3, 3), 64 => 128; stride=2, pad=1, use_bias=false), BatchNorm(128, relu),
        Conv((3, 3), 128 => 128; pad=1, use_bias=false), BatchNorm(128),
        GlobalMeanPool(), FlattenLayer(), Dense(128, 10)), (32, 32, 3)),
)

const OPTS = options(ARGS)
const NAME = OPTS["name"]
const MODEL = get(OPTS, "model", "")
haskey(MODELS, MODEL) || fail("model '$MODEL' is not supported: use one of $(join(sort(collect(keys(MODELS))), ", "))")
OPTS["precision"] == "fp32" || fail("precision $(OPTS["precision"]) is not supported: the seed's models are Float32")
const OPS = split(OPTS["ops"], ',')
for op in OPS
    op in ("inference", "training") || fail("op '$op' is not supported: use inference, training")
end
haskey(OPTS, "batch_sizes") || fail("--batch-sizes is required, e.g. --batch-sizes 2,8,32")
const BATCH_SIZES = parse.(Int, split(OPTS["batch_sizes"], ','))
OPTS["device"] in ("auto", "cpu", "gpu") || fail("device $(OPTS["device"]) is not supported: use auto, cpu or gpu")

const WANT_GPU = OPTS["device"] == "gpu" || (OPTS["device"] == "auto" && Base.find_package("CUDA") !== nothing)
if WANT_GPU
    using CUDA, LuxCUDA
end
const ON_GPU = WANT_GPU && CUDA.functional()
OPTS["device"] == "gpu" && !ON_GPU && fail("device gpu, but CUDA.jl sees no working GPU: use --device cpu")
const dev = ON_GPU ? gpu_device(; force=true) : cpu_device()
sync() = ON_GPU ? CUDA.synchronize() : nothing  # the seed's CUDA.@sync, without a GPU package on the CPU

BenchmarkTools.DEFAULT_PARAMETERS.gcsample = true
BenchmarkTools.DEFAULT_PARAMETERS.seconds = parse(Float64, OPTS["seconds"])  # the seed's 30 s by default

emit(fields...) = (println(join(fields, '\t')); flush(stdout))

# One training step as the seed writes it: loss sum((ŷ − y)²), Zygote gradient, Adam update.
function lux_step(model, ps, st, opt_state, x, y)
    (loss, st_new), back = Zygote.pullback(p -> begin
        ypred, st_ = model(x, p, st)
        sum(abs2, ypred .- y), st_
    end, ps)
    gs = back((one(loss), nothing))[1]
    opt_state_new, ps_new = Optimisers.update(opt_state, ps, gs)
    ps_new, st_new, opt_state_new, loss
end

function measure(model, ps, st, op, bs, input)
    rng = Random.default_rng()
    x = randn(rng, Float32, input..., bs) |> dev
    if op == "inference"
        st_test = Lux.testmode(st)
        model(x, ps, st_test)  # the first call (compilation) stays out of the samples
        return @benchmark begin
            $model($x, $ps, $st_test)
            sync()
        end
    end
    y = randn(rng, Float32, 10, bs) |> dev
    opt_state = Optimisers.setup(Adam(1.0f-3), ps)
    lux_step(model, ps, st, opt_state, x, y)
    return @benchmark begin
        lux_step($model, $ps, $st, $opt_state, $x, $y)
        sync()
    end
end

function main()
    Random.seed!(Random.default_rng(), 12345)
    build, input = MODELS[MODEL]
    model = build()
    ps, st = Lux.setup(Random.default_rng(), model)
    ps, st = ps |> dev, st |> dev
    device = ON_GPU ? "cuda:$(CUDA.deviceid(CUDA.device())) ($(CUDA.name(CUDA.device())))" : "cpu"
    emit("METADATA", "$NAME device", device)
    emit("METADATA", "$NAME version", string(pkgversion(Lux)))
    emit("METADATA", "$NAME Julia version", string(VERSION))
    for op in OPS, bs in BATCH_SIZES
        t = measure(model, ps, st, op, bs, input)
        point = (NAME, MODEL, op, bs)
        emit("SAMPLES", point..., join(string.(t.times ./ 1e9), ','))  # t.times: ns per call, one per sample
        emit("TIMING", point..., median(t).time / 1e9)
        @info "$MODEL $op batch $bs done"
    end
end

main()
