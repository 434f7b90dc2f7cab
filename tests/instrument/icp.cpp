// Indirect call sites for `rivet optimize --indirect-call-promotion` (crates/cli/tests/icp.rs):
// a virtual call (through a memory operand, the vtable slot), a function pointer in a
// register, a call through r11 (in assembly, since compilers rarely pick it), a memory
// operand based on r11, exceptions thrown through a promoted call, a callee in a shared
// library (libc's `labs` through a pointer), and a call to a function that never returns.
// Each site's callees are skewed so that one or two of them make most of the calls. The
// program prints a checksum that depends on every call, so a wrong callee changes the output.
//
// Usage: icp N   (N rounds; the output depends on N)

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

struct Shape {
    virtual long area(long k) const = 0;
    virtual ~Shape() {}
};
struct Square : Shape {
    long s;
    explicit Square(long v) : s(v) {}
    long area(long k) const override { return s * s + k; }
};
struct Rect : Shape {
    long w, h;
    Rect(long a, long b) : w(a), h(b) {}
    long area(long k) const override { return w * h - k; }
};
struct Tri : Shape {
    long b, h;
    Tri(long x, long y) : b(x), h(y) {}
    long area(long k) const override { return b * h / 2 + (k & 3); }
};

__attribute__((noinline)) long sum_areas(Shape **shapes, int n, long k) {
    long total = 0;
    for (int i = 0; i < n; i++)
        total += shapes[i]->area(k + i);
    return total;
}

typedef long (*op_t)(long, long);
__attribute__((noinline)) long add(long a, long b) { return a + b; }
__attribute__((noinline)) long sub(long a, long b) { return a - b; }
__attribute__((noinline)) long mul(long a, long b) { return a * b % 1000003; }
__attribute__((noinline)) long xorl(long a, long b) { return a ^ b; }

__attribute__((noinline)) long apply(op_t op, long a, long b) { return op(a, b) + 1; }

// A call whose operand is r11, and one through memory at an offset from r11.
extern "C" long call_via_r11(op_t op, long a, long b);
extern "C" long call_via_r11_memory(op_t *slot, long a, long b);
__asm__(".text\n"
        ".globl call_via_r11\n"
        ".type call_via_r11, @function\n"
        "call_via_r11:\n"
        "  .cfi_startproc\n"
        "  subq $8, %rsp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  movq %rdi, %r11\n"
        "  movq %rsi, %rdi\n"
        "  movq %rdx, %rsi\n"
        "  call *%r11\n"
        "  addq $8, %rsp\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size call_via_r11, .-call_via_r11\n"
        ".globl call_via_r11_memory\n"
        ".type call_via_r11_memory, @function\n"
        "call_via_r11_memory:\n"
        "  .cfi_startproc\n"
        "  subq $8, %rsp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  leaq -16(%rdi), %r11\n"
        "  movq %rsi, %rdi\n"
        "  movq %rdx, %rsi\n"
        "  call *16(%r11)\n"
        "  addq $8, %rsp\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size call_via_r11_memory, .-call_via_r11_memory\n");

// Exceptions through a promoted call: most calls return, every 97th throws.
typedef long (*may_throw_t)(long);
__attribute__((noinline)) long checked(long v) {
    if (v % 97 == 0)
        throw std::runtime_error("multiple of 97");
    return v * 3;
}
__attribute__((noinline)) long unchecked(long v) { return v + 7; }
__attribute__((noinline)) long guarded(may_throw_t f, long v) {
    try {
        return f(v);
    } catch (const std::runtime_error &) {
        return -1;
    }
}

// A callee in libc: never promoted (its address is not known when the binary is written).
typedef long (*unary_t)(long);
__attribute__((noinline)) long lib_call(unary_t f, long v) { return f(v) + 2; }
__attribute__((noinline)) long negate(long v) { return -v; }

// A call that never returns, through a pointer the compiler knows never returns.
typedef void (*die_t)(long) __attribute__((noreturn));
__attribute__((noinline, noreturn)) void finish(long code) {
    fflush(stdout);
    exit((int)(code & 0));
}
__attribute__((noinline, noreturn)) void finish_loudly(long code) {
    printf("loud %ld\n", code);
    fflush(stdout);
    exit(0);
}
__attribute__((noinline, noreturn)) void end(die_t die, long code) { die(code); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    Square sq(3);
    Rect re(4, 5);
    Tri tr(6, 7);
    Shape *shapes[16];
    for (int i = 0; i < 16; i++)
        shapes[i] = i == 15 ? (Shape *)&tr : i == 14 ? (Shape *)&re : (Shape *)&sq;
    op_t ops[10] = {add, add, add, add, add, add, add, sub, sub, mul};
    op_t r11_ops[8] = {mul, mul, mul, mul, mul, mul, xorl, add};
    long sum = 0;
    for (long i = 0; i < n; i++) {
        sum += sum_areas(shapes, 16, i);
        sum += apply(ops[i % 10], sum & 0xffff, i);
        sum += call_via_r11(r11_ops[i % 8], i, 3);
        sum += call_via_r11_memory(&r11_ops[(i + 1) % 8], i, 5);
        sum += guarded(i % 5 ? checked : unchecked, i);
        sum += lib_call(i % 9 ? labs : negate, -i);
        sum %= 1000000007;
    }
    printf("checksum %ld\n", sum);
    end(n % 2 ? finish : finish_loudly, sum);
}
