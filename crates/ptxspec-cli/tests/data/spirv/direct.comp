#version 450
// Specialization constants used directly (no spec-constant arithmetic), so
// the module can be frozen.
layout(local_size_x = 1) in;
layout(constant_id = 1) const int offset_v = -3;
layout(constant_id = 2) const float gain = 0.25;
layout(std430, binding = 0) buffer Out { float v[]; } o;
void main() { o.v[0] = gain; o.v[1] = intBitsToFloat(offset_v); }
