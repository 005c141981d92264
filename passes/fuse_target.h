/*
 * fuse_target.h — lowering fused nodes to the ops of a target runtime
 * (internal to passes/; used by fuse.c for --target ort and onnx).
 *
 * A fused node is replaced by ONNX Runtime contrib ops (target ort) or
 * standard ONNX ops (target onnx) only when they compute exactly the
 * function the fused op defines (README "Fused ops") for this node: its
 * attributes, dtype, shapes and the model's ai.onnx opset are checked
 * first.  Otherwise the node is left alone and fuse.c writes it as a
 * call of a model-local function (README "Optimize", "Targets").
 */
#ifndef GF_FUSE_TARGET_H
#define GF_FUSE_TARGET_H

#include <stdbool.h>

#include "gf_passes.h"

struct gf_lower;

/* State of one emission for target t (GF_TARGET_ORT or GF_TARGET_ONNX):
 * the constants and RoPE tables several nodes share.  NULL on OOM. */
struct gf_lower *gf_lower_new(struct gf_model *m, enum gf_fuse_target t);
void gf_lower_free(struct gf_lower *l);

/* Replaces fused node n by the target's ops and sets *done when they
 * compute exactly what n computes; else changes nothing (*done false).
 * New nodes take n's place and its output values; new values get no type
 * (the caller infers shapes afterwards).  Errors: GF_ERR_NOMEM (the graph
 * is then broken: discard the model). */
enum gf_status gf_lower_node(struct gf_lower *l, struct gf_node *n, bool *done);

#endif
