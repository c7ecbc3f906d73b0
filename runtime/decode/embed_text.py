#!/usr/bin/env python3
"""embed_text.py IN OUT SYMBOL - write a C file defining `const char SYMBOL[]`
holding the text of IN (used to compile the shape catalog into spark-decode)."""
import sys

src, out, sym = sys.argv[1:4]
with open(src, 'rb') as f:
    data = f.read()
lines = ['/* generated from %s by embed_text.py: do not edit */' % src.split('/')[-1],
         'const char %s[] =' % sym]
for line in data.decode('utf-8').splitlines(keepends=True):
    esc = line.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
    lines.append('\t"%s"' % esc)
lines.append('\t"";')
with open(out, 'w') as f:
    f.write('\n'.join(lines) + '\n')
