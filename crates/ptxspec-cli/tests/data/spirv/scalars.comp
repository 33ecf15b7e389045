#version 450
// Scalar specialization constants as GLSL declares them; the arithmetic
// makes glslang emit OpSpecConstantOp too (which freezing cannot evaluate).
layout(local_size_x = 1) in;
layout(constant_id = 0) const int id_int = 42;
layout(constant_id = 3) const float scale = 1.5;
layout(constant_id = 7) const bool flag = true;
layout(constant_id = 9) const uint count = 7u;
layout(std430, binding = 0) buffer Out { float v[]; } o;
void main() { o.v[0] = flag ? scale * float(id_int + int(count)) : 0.0; }
