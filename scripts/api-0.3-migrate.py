#!/usr/bin/env python3
"""Moves C sources written for the blockfp8 0.2 API to 0.3 (docs/api-0.3-renames.md): the renames, one word for
another, and the four calls whose output parameter moved to the end, whose arguments are reordered in place
(calls spanning lines included); in tests, `test_rng_state_ = S;` becomes `test_rng_init(&test_rng_, S);`, and under
tools/ bfp8_load_f32 becomes test_load_f32. Declarations and definitions of the four calls are left alone: edit
them by hand.

    python3 scripts/api-0.3-migrate.py FILE...     rewrites the files, prints the ones it changed
"""
import re
import sys

# old -> new, read from the table of docs/api-0.3-renames.md when it is beside this script's tree.
RENAMES_DOC = __file__.rsplit('/scripts/', 1)[0] + '/docs/api-0.3-renames.md'

# name -> (the new position of each old argument: new_args = [old[i] for i in order], the index of the output
# argument in the old order, and in the new one).
REORDERS = {
    'bfp8_weight_create': ([1, 2, 3, 4, 0], 0, 4),
    'bfp8_weight_quantize': ([1, 2, 3, 4, 5, 0, 6], 0, 5),
    'bfp8_cuda_malloc': ([1, 0], 0, 1),
    'bfp8_cuda_malloc_async': ([1, 0, 2], 0, 1),
}


def looks_like_output(arg):
    """An argument that is a place to store a result: &x, (void **)&x, out, a name ending in _out."""
    a = re.sub(r'^\(\s*void\s*\*\s*\*\s*\)\s*', '', arg.strip())
    return a.startswith('&') or re.match(r'^(out|\w+_out)$', a) is not None


def renames():
    pairs = []
    for line in open(RENAMES_DOC, encoding='utf-8'):
        m = re.match(r'^`?([A-Za-z_][A-Za-z0-9_]*)`?\s*->\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*$', line.strip())
        if m:
            pairs.append((m.group(1), m.group(2)))
    return pairs


def split_args(text, start):
    """Arguments of the call whose '(' is at text[start]; returns (args, index after ')') or None."""
    depth, i, cur, args = 0, start, [], []
    while i < len(text):
        c = text[i]
        if c in '([{':
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ')]}':
            depth -= 1
            if depth == 0:
                args.append(''.join(cur))
                return args, i + 1
            cur.append(c)
        elif c == ',' and depth == 1:
            args.append(''.join(cur))
            cur = []
        elif c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            cur.append(text[i:j + 1])
            i = j
        else:
            cur.append(c)
        i += 1
    return None


def is_declaration(text, name_start):
    line_start = text.rfind('\n', 0, name_start) + 1
    before = text[line_start:name_start]
    return re.match(r'^\s*(static\s+|extern\s+|inline\s+)*[A-Za-z_]\w*\s*\**\s*$', before) is not None and \
        not re.match(r'^\s*return\b', before)


def reorder(text):
    for name, (order, old_out, new_out) in REORDERS.items():
        pos = 0
        pat = re.compile(r'\b%s\s*\(' % name)
        while True:
            m = pat.search(text, pos)
            if not m:
                break
            paren = m.end() - 1
            got = split_args(text, paren)
            if not got or len(got[0]) != len(order) or is_declaration(text, m.start()):
                pos = m.end()
                continue
            args, end = got
            # Only calls in the old order (an output-like first argument) move, so that running the script twice,
            # or over code already moved, changes nothing; a call where neither order is evident is reported.
            if not looks_like_output(args[old_out]):
                if not looks_like_output(args[new_out]):
                    line = text.count('\n', 0, m.start()) + 1
                    sys.stderr.write('%s:%d: %s: argument order not evident, check by hand\n' % (CURRENT, line, name))
                pos = m.end()
                continue
            # Keep each argument's own leading whitespace pattern: strip, then rejoin with ", " unless the call
            # spans lines, where the original separators are reused in order.
            stripped = [a.strip() for a in args]
            seps = [re.match(r'^\s*', a).group(0) for a in args[1:]]
            new = stripped[order[0]]
            for k, idx in enumerate(order[1:]):
                sep = seps[k] if '\n' in seps[k] else ' '
                new += ',' + sep + stripped[idx]
            text = text[:paren + 1] + new + text[end - 1:]
            pos = paren + 1 + len(new)
    return text


CURRENT = ''


def main(paths):
    global CURRENT
    pairs = renames()
    for path in paths:
        if path.endswith('api-0.3-renames.md'):
            continue  # the list itself
        CURRENT = path
        src = open(path, encoding='utf-8').read()
        out = src
        for old, new in pairs:
            out = re.sub(r'\b%s\b' % re.escape(old), new, out)
        out = reorder(out)
        # The tests' generator is a test_rng now (tests/check.h), and the CLI reads floats with tests/common's helper.
        out = re.sub(r'\btest_rng_state_\s*=\s*([^;]+);', r'test_rng_init(&test_rng_, \1);', out)
        if '/tools/' in '/' + path:
            out = re.sub(r'\bbfp8_load_f32\b', 'test_load_f32', out)
        if out != src:
            open(path, 'w', encoding='utf-8').write(out)
            print(path)


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
