/* libFuzzer target over the planner's parsers (models/): a Hugging Face
 * config.json, the YAML model catalog and a decode calibration file. The
 * first byte picks the parser; the rest is the input. A shape that parses is
 * run through the parameter, fit and decode arithmetic, which must give
 * finite, non-negative numbers; every failure must explain itself. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static void exercise(const model_shape_t *s, unsigned knob)
{
	model_params_t p;
	char err[MODEL_ERR_LEN];
	if (model_params(s, &p) < 0)
		return;
	if (!isfinite(p.total) || p.total < 0 || p.active < 0)
		abort();
	model_fit_opts_t o = {.nodes = 1 + (int)(knob % 8), .dtype = knob & 8 ? "nvfp4" : NULL,
			      .context = 1 + (knob >> 4), .overhead_gib = -1};
	model_fit_t f;
	err[0] = '\0';
	if (model_fit(s, &o, &f, err, sizeof err) < 0) {
		if (!err[0])
			abort();
	} else if (!isfinite(f.weights_b) || f.weights_b < 0 || f.kv_b < 0 || f.max_context < 0) {
		abort();
	}
	if (s->shape_known && s->layers <= 512) {
		model_calib_t c;
		model_decode_row_t rows[8];
		model_decode_opts_t d = {.nodes = 1 + (int)(knob % 8), .dtype = "bf16"};
		model_calib_default(&c, 0.7);
		if (model_decode(s, &d, &c, rows, err, sizeof err) == 0)
			for (int i = 0; i < d.nodes; i++)
				if (!(rows[i].tok_s > 0) || !isfinite(rows[i].token_s))
					abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[MODEL_ERR_LEN];
	if (size < 1)
		return 0;
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	err[0] = '\0';
	switch (data[0] % 3) {
	case 0: {
		model_shape_t s;
		if (model_shape_parse_config(text, len, NULL, &s, err, sizeof err) == 0)
			exercise(&s, data[0]);
		else if (!err[0])
			abort();
		break;
	}
	case 1: {
		model_catalog_t c;
		if (model_catalog_parse(text, len, &c, err, sizeof err) == 0) {
			for (size_t i = 0; i < c.n && i < 4; i++)
				exercise(&c.shapes[i], data[0]);
			double eff;
			int used, skipped;
			if (model_calibrate_efficiency(&c, 0, &eff, &used, &skipped) == 0 &&
			    !(eff > 0 && eff <= 1))
				abort();
			model_catalog_free(&c);
		} else if (!err[0]) {
			abort();
		}
		break;
	}
	case 2: {
		model_calib_t c;
		model_calib_default(&c, 1);
		if (model_calib_parse(text, len, &c, err, sizeof err) < 0 && !err[0])
			abort();
		break;
	}
	}
	return 0;
}
