/* cfg: YAML configuration into jansson, with located errors. */
#include "common/cfg.h"
#include "common/util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static json_t *parse_ok(const char *text)
{
	json_t *o = NULL;
	char err[256] = "";
	int r = cfg_parse("t.yaml", text, strlen(text), &o, err, sizeof err);
	cr_assert_eq(r, 0, "parse failed: %s", err);
	cr_assert(json_is_object(o));
	return o;
}

/* Parse text expecting an error; the message must start with want_prefix. */
static void parse_err(const char *text, const char *want_prefix, const char *want_sub)
{
	json_t *o = (json_t *)1;
	char err[256] = "";
	int r = cfg_parse("t.yaml", text, strlen(text), &o, err, sizeof err);
	cr_assert_eq(r, -EINVAL, "expected an error for %s", text);
	cr_assert_null(o, "no tree on error");
	cr_assert(strncmp(err, want_prefix, strlen(want_prefix)) == 0,
		  "error \"%s\" should start with \"%s\"", err, want_prefix);
	if (want_sub)
		cr_assert(strstr(err, want_sub), "error \"%s\" should mention \"%s\"", err, want_sub);
}

Test(cfg, nested_maps_and_dotted_paths)
{
	json_t *o = parse_ok("node:\n"
			     "  name: spark-1\n"
			     "  fabric:\n"
			     "    mtu: 9000\n"
			     "    roce: true\n"
			     "log_level: debug\n");
	cr_assert_str_eq(json_string_value(cfg_get(o, "node.name")), "spark-1");
	cr_assert_str_eq(json_string_value(cfg_get(o, "node.fabric.mtu")), "9000",
			 "scalars stay strings");
	cr_assert(json_is_object(cfg_get(o, "node.fabric")));
	cr_assert_null(cfg_get(o, "node.fabric.mtu.x"), "cannot descend into a scalar");
	cr_assert_null(cfg_get(o, "node.missing"));
	cr_assert_null(cfg_get(o, "nothing"));
	const char *s = NULL;
	cr_assert_eq(cfg_get_str(o, "log_level", &s, NULL, 0), 0);
	cr_assert_str_eq(s, "debug");
	char err[128] = "";
	cr_assert_eq(cfg_get_str(o, "node.fabric", &s, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "node.fabric"), "error names the key: %s", err);
	json_decref(o);
}

Test(cfg, sequences_block_and_flow)
{
	json_t *o = parse_ok("interfaces:\n"
			     "  - enp1s0f0np0\n"
			     "  - enp1s0f1np1\n"
			     "peers: [a, b, {name: c, port: 7300}]\n"
			     "empty: []\n");
	json_t *ifs = cfg_get(o, "interfaces");
	cr_assert(json_is_array(ifs));
	cr_assert_eq(json_array_size(ifs), 2);
	cr_assert_str_eq(json_string_value(json_array_get(ifs, 1)), "enp1s0f1np1");
	json_t *peers = cfg_get(o, "peers");
	cr_assert_eq(json_array_size(peers), 3);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(peers, 2), "port")),
			 "7300");
	cr_assert_eq(json_array_size(cfg_get(o, "empty")), 0);
	json_decref(o);
}

Test(cfg, errors_carry_file_line_col)
{
	parse_err("a: b: c\n", "t.yaml:1:5: ", NULL);
	parse_err("a: 1\nb: [1, 2\n", "t.yaml:3:", NULL);
	parse_err("a: 1\n\tb: 2\n", "t.yaml:2:1: ", "tab");
	/* bad encoding: the reader reports the byte, converted to line:col */
	parse_err("a: 1\nbb: \xff\n", "t.yaml:2:5: ", NULL);
}

Test(cfg, duplicate_keys_refused)
{
	parse_err("a: 1\nb: 2\na: 3\n", "t.yaml:3:1: ", "duplicate key \"a\"");
	parse_err("m: {b: 1, b: 2}\n", "t.yaml:1:11: ", "duplicate key \"b\"");
	/* the same key in different maps is fine */
	json_t *o = parse_ok("x: {a: 1}\ny: {a: 2}\n");
	json_decref(o);
}

Test(cfg, long_keys_are_not_truncated)
{
	/* two different 300-char keys that share their first 255 characters */
	char text[1024];
	char k1[301], k2[301];
	memset(k1, 'k', 300);
	k1[300] = '\0';
	memcpy(k2, k1, sizeof k2);
	k2[299] = 'z';
	snprintf(text, sizeof text, "%s: 1\n%s: 2\n", k1, k2);
	parse_err(text, "t.yaml:1:1: ", "too long");
	parse_err("\"a\\0b\": 1\n", "t.yaml:1:1: ", "NUL");
}

Test(cfg, aliases_and_complex_keys_refused)
{
	parse_err("a: &x 1\nb: *x\n", "t.yaml:2:4: ", "aliases");
	parse_err("base: &b {x: 1}\nother:\n  <<: *b\n", "t.yaml:3:7: ", "aliases");
	parse_err("? [a, b]\n: 1\n", "t.yaml:1:3: ", "keys");
}

Test(cfg, empty_documents_are_empty_maps)
{
	static const char *empties[] = {"", "\n", "---\n", "# only a comment\n", "---\n...\n"};
	for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
		json_t *o = parse_ok(empties[i]);
		cr_assert_eq(json_object_size(o), 0, "case %zu", i);
		json_decref(o);
	}
	/* the top level must be a mapping */
	parse_err("hello\n", "t.yaml:1:1: ", "mapping");
	parse_err("- a\n- b\n", "t.yaml:1:1: ", "mapping");
}

Test(cfg, only_first_document_is_read)
{
	json_t *o = parse_ok("a: 1\n---\nb: 2\n");
	cr_assert_not_null(cfg_get(o, "a"));
	cr_assert_null(cfg_get(o, "b"));
	json_decref(o);
}

Test(cfg, deep_nesting_refused)
{
	char text[512] = "";
	for (int i = 0; i < 40; i++)
		strcat(text, "[");
	char doc[600];
	snprintf(doc, sizeof doc, "a: %s\n", text);
	parse_err(doc, "t.yaml:1:", "deep");
}

Test(cfg, get_int_bounds)
{
	json_t *o = parse_ok("port: 7300\nneg: -5\nbig: 99999999999999999999\nword: abc\n"
			     "half: 12abc\nempty: \"\"\nmap: {a: 1}\n");
	long long v = -1;
	char err[128];
	cr_assert_eq(cfg_get_int(o, "port", 1, 65535, &v, err, sizeof err), 0);
	cr_assert_eq(v, 7300);
	cr_assert_eq(cfg_get_int(o, "port", 7300, 7300, &v, err, sizeof err), 0,
		     "bounds are inclusive");
	v = 42;
	err[0] = '\0';
	cr_assert_eq(cfg_get_int(o, "port", 1, 7299, &v, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "port") && strstr(err, "7299"), "err: %s", err);
	cr_assert_eq(v, 42, "out untouched on error");
	cr_assert_eq(cfg_get_int(o, "port", 7301, 9000, &v, err, sizeof err), -EINVAL);
	cr_assert_eq(cfg_get_int(o, "neg", -10, 10, &v, err, sizeof err), 0);
	cr_assert_eq(v, -5);
	cr_assert_eq(cfg_get_int(o, "neg", 0, 10, &v, err, sizeof err), -EINVAL);
	cr_assert_eq(cfg_get_int(o, "big", 0, 1LL << 62, &v, err, sizeof err), -EINVAL,
		     "overflow is an error");
	cr_assert_eq(cfg_get_int(o, "word", 0, 10, &v, err, sizeof err), -EINVAL);
	cr_assert_eq(cfg_get_int(o, "half", 0, 100, &v, err, sizeof err), -EINVAL);
	cr_assert_eq(cfg_get_int(o, "empty", 0, 100, &v, err, sizeof err), -EINVAL);
	cr_assert_eq(cfg_get_int(o, "map", 0, 100, &v, err, sizeof err), -EINVAL);
	v = 42;
	cr_assert_eq(cfg_get_int(o, "absent", 0, 100, &v, err, sizeof err), -ENOENT);
	cr_assert_eq(v, 42);
	json_decref(o);
}

Test(cfg, check_keys_catches_typos)
{
	json_t *o = parse_ok("listen: 0.0.0.0:7300\nstate_dir: /tmp/x\n");
	static const char *const allowed[] = {"listen", "state_dir", "socket", NULL};
	char err[128] = "";
	cr_assert_eq(cfg_check_keys(o, "sparkd.yaml", allowed, err, sizeof err), 0);
	json_decref(o);
	o = parse_ok("listen: 0.0.0.0:7300\nstate_dri: /tmp/x\n");
	cr_assert_eq(cfg_check_keys(o, "sparkd.yaml", allowed, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "state_dri"), "names the unknown key: %s", err);
	cr_assert(strstr(err, "sparkd.yaml"), "names where: %s", err);
	json_decref(o);
	o = parse_ok("");
	cr_assert_eq(cfg_check_keys(o, "x", allowed, err, sizeof err), 0);
	json_decref(o);
}

Test(cfg, load_file_and_missing_file)
{
	char dir[] = "/tmp/cfgtestXXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof path, "%s/sparkd.yaml", dir);
	const char *text = "listen: \"[::1]:7300\"\nbad: [\n";
	cr_assert_eq(util_write_file(path, text, strlen(text), 0644), 0);
	json_t *o = (json_t *)1;
	char err[512] = "";
	cr_assert_eq(cfg_load(path, &o, err, sizeof err), -EINVAL);
	char want[300];
	snprintf(want, sizeof want, "%s:3:", path);
	cr_assert(strncmp(err, want, strlen(want)) == 0, "error names the file: %s", err);
	text = "listen: \"[::1]:7300\"\n";
	cr_assert_eq(util_write_file(path, text, strlen(text), 0644), 0);
	cr_assert_eq(cfg_load(path, &o, err, sizeof err), 0);
	cr_assert_str_eq(json_string_value(cfg_get(o, "listen")), "[::1]:7300");
	json_decref(o);
	unlink(path);
	err[0] = '\0';
	cr_assert_eq(cfg_load(path, &o, err, sizeof err), -ENOENT);
	cr_assert(strstr(err, path), "err: %s", err);
	rmdir(dir);
}
