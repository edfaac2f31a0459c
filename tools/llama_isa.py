"""tools/llama_isa.py — which x86 kernels the loaded llama.cpp uses, for the reference tools.

Our CPU backend reproduces llama.cpp's AVX2 kernels bit for bit. llama-cpp-python built with GGML_NATIVE=ON on
an AVX-512 machine takes other kernels (16-lane f16 dot products, soft_max and tinyBLAS tiles): its logits
differ from the AVX2 build's at llama.cpp's own noise floor (SmolLM2 Q4_1, 33-token chat prompt: mean KL 1.8e-3,
max 1.3e-2), which reads as our bug when it is not. tools/build_llama_avx2.sh builds the AVX2 libraries;
LLAMA_CPP_LIB_PATH points llama-cpp-python at them.
"""
import sys


def is_avx2_build(llama_cpp):
    info = llama_cpp.llama_print_system_info().decode()
    return "AVX2 = 1" in info and "AVX512 = 1" not in info, info.strip()


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
