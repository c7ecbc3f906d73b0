/* libFuzzer target over spark-decode's file parsers: the safetensors header
 * (length, JSON, dtypes, shapes, offsets against the file size), config.json
 * and the YAML shape catalog. The first byte picks the parser; the rest is
 * the input. Accepted safetensors headers must describe tensors that lie
 * inside the file with sizes matching their shapes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dec.h"

static void check_st(const uint8_t *data, size_t size)
{
	dec_st_header_t h;
	char err[DEC_ERR_LEN];

	if (dec_st_parse(data, size, size, &h, err, sizeof(err)) < 0) {
		if (!err[0])
			abort(); /* every failure explains itself */
		return;
	}
	for (int i = 0; i < h.n; i++) {
		const dec_st_tensor_t *t = &h.t[i];
		uint64_t nel = 1;
		for (int d = 0; d < t->ndim; d++)
			nel *= (uint64_t)t->shape[d];
		if (t->begin > t->end || h.data_start + t->end > size || !t->name)
			abort();
		if (t->supported && t->end - t->begin != nel * dec_dtype_size(t->dtype))
			abort();
	}
	dec_st_header_free(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[DEC_ERR_LEN];
	dec_config_t c;

	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		check_st(data + 1, size - 1);
		break;
	case 1:
		if (dec_config_parse((const char *)data + 1, size - 1, &c, err, sizeof(err)) == 0) {
			if (dec_config_check(&c, err, sizeof(err)) != 0)
				abort(); /* parse() returns only checked configs */
			(void)dec_config_check_world(&c, 1 + data[0] % 16, err, sizeof(err));
		}
		break;
	case 2:
		(void)dec_shape_find((const char *)data + 1, size - 1, "tiny", &c, err, sizeof(err));
		break;
	}
	return 0;
}
