"""R's serialization format (XDR, versions 2 and 3), read in plain Python:
just enough for the data R packages ship (character, integer and logical
vectors, lists, pairlists, names), which is what tools/extract_corpus.py
needs for janeaustenr's novels."""


class RReader:
    """One serialized R object: item() gives str (or None for NA) for a
    string, a list for a vector, a dict for a named list, and a list of
    (tag, value) for a pairlist; doubles are skipped (None)."""

    NIL, SYM, LIST, CHAR, LGL, INT, REAL, STR, VEC, REF = 254, 1, 2, 9, 10, 13, 14, 16, 19, 255
    SPECIAL = {254, 253, 252, 251, 250, 242}  # nil, global/empty/base env, unbound, missing

    def __init__(self, raw):
        if raw[:2] != b"X\n":
            raise RuntimeError("not XDR R serialization")
        self.raw, self.pos, self.refs = raw, 2, []
        version = self.int()
        self.int(), self.int()  # writer version, minimal reader version
        if version == 3:
            length = self.int()  # then the native encoding's name
            self.pos += length
        elif version != 2:
            raise RuntimeError("R serialization version %d" % version)

    def int(self):
        v = int.from_bytes(self.raw[self.pos:self.pos + 4], "big", signed=True)
        self.pos += 4
        return v

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in self.SPECIAL:
            return None
        if kind == self.REF:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == self.SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == self.CHAR:
            n = self.int()
            if n == -1:
                return None  # NA
            s = self.raw[self.pos:self.pos + n]
            self.pos += n
            return s.decode("latin-1" if flags & (1 << 14) else "utf-8")
        if kind == self.LIST:
            if has_attr:
                self.item()  # a pairlist's own attributes: not needed
            tag = self.item() if has_tag else None
            head = self.item()
            rest = self.item()
            return [(tag, head)] + (rest or [])
        if kind in (self.STR, self.VEC):
            value = [self.item() for _ in range(self.int())]
        elif kind in (self.LGL, self.INT):
            n = self.int()
            value = [int.from_bytes(self.raw[self.pos + 4 * i:self.pos + 4 * i + 4], "big", signed=True)
                     for i in range(n)]
            self.pos += 4 * n
        elif kind == self.REAL:
            self.pos += 8 * self.int()
            value = None
        else:
            raise RuntimeError("R serialization: unsupported type %d" % kind)
        attributes = dict(self.item()) if has_attr else {}
        if kind == self.VEC and "names" in attributes:  # a named list
            return dict(zip(attributes["names"], value))
        return value
