"""tools/llama_isa.py — which x86 kernels the loaded llama.cpp uses, for the reference tools.

Our CPU backend reproduces llama.cpp's AVX2 kernels bit for bit. llama-cpp-python built with GGML_NATIVE=ON on
an AVX-512 machine takes other kernels (16-lane f16 dot products, soft_max and tinyBLAS tiles): its logits
differ from the AVX2 build's at llama.cpp's own noise floor (SmolLM2 Q4_1, 33-token chat prompt: mean KL 1.8e-3,
max 1.3e-2), which reads as our bug when it is not. tools/build_llama_avx2.sh builds the AVX2 libraries;
LLAMA_CPP_LIB_PATH points llama-cpp-python at them.

The AVX-512 golden set (tests/data/ref/avx512, tools/gen_ref_golden.py --isa avx512) comes from the native
build on an AVX-512 host (ISA=native tools/build_llama_avx2.sh); require_isa checks for either.
"""
import sys


def is_avx2_build(llama_cpp):
    info = llama_cpp.llama_print_system_info().decode()
    return "AVX2 = 1" in info and "AVX512 = 1" not in info, info.strip()


def isa_of(llama_cpp):
    """'avx512', 'avx2' or 'other': the widest x86 kernels the loaded llama.cpp was built with."""
    info = llama_cpp.llama_print_system_info().decode()
    if "AVX512 = 1" in info:
        return "avx512"
    return "avx2" if "AVX2 = 1" in info else "other"


def require_isa(llama_cpp, isa, tool, allow_other=False):
    """Exits (or warns, with allow_other) unless llama_cpp is the build of that ISA (avx2 | avx512)."""
    if isa == "avx2":
        return require_avx2_build(llama_cpp, tool, allow_other)
    got = isa_of(llama_cpp)
    if got == isa:
        return
    msg = (f"{tool}: the llama.cpp loaded is a {got} build, not {isa}; on an AVX-512 host run "
           "ISA=native tools/build_llama_avx2.sh and set LLAMA_CPP_LIB_PATH to the directory it prints")
    if not allow_other:
        sys.exit(msg)
    print("warning: " + msg, file=sys.stderr)


def require_avx2_build(llama_cpp, tool, allow_other=False):
    """Exits (or warns, with allow_other) unless llama_cpp runs llama.cpp's AVX2 kernels."""
    ok, info = is_avx2_build(llama_cpp)
    if ok:
        return
    msg = (f"{tool}: the llama.cpp loaded is not the AVX2 build our CPU backend reproduces ({info}); run "
           "tools/build_llama_avx2.sh and set LLAMA_CPP_LIB_PATH to the directory it prints")
    if not allow_other:
        sys.exit(msg)
    print("warning: " + msg, file=sys.stderr)
