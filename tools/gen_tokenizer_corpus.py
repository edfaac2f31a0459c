#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.jsonl: a deterministic set of tokenizer test strings.

Each line: {"id": N, "kind": "...", "hex": "<the bytes, hex>"}. Kinds: English and multilingual
prose, CJK, emoji (ZWJ sequences, flags, skin tones), code, whitespace runs, digits, long words,
invalid UTF-8, empty strings, special-token text, random code points, and mixes of them.

The same seed always gives the same file (no network, no clock). Invalid UTF-8 never decodes
(with llama.cpp's lenient decoder) to a code point above U+10FFFF: llama.cpp throws on those.

With --seeds DIR it also writes every 50th string as a file (the fuzzer's seed corpus,
tests/data/tokenizer/fuzz_seeds).

usage: tools/gen_tokenizer_corpus.py [-o tests/data/tokenizer/corpus.jsonl] [--seed 1234] [-n 2400]
                                     [--seeds tests/data/tokenizer/fuzz_seeds]
"""
import argparse
import json
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[1]

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse,",
    "I've been thinking about what you said, and I don't think you're right; they'll see, we'd agree.",
    "She sells sea-shells on the sea-shore; the shells she sells are sea-shells, I'm sure.",
    "In 1969, Apollo 11 landed on the Moon: Neil Armstrong's first words were famous.",
    "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
    "HELLO WORLD!!! THIS IS A TEST OF UPPER-CASE TEXT, DON'T YOU THINK? WE'LL SEE.",
    "e-mail me at someone@example.com or visit https://example.org/path?query=1&x=y#frag",
    "The price rose from $3.50 to $4.75 (a 35.7% increase) between Q1 and Q3 2023.",
    "Wait... what?! No way -- that's *exactly* what I meant (sort of).",
    "A journey of a thousand miles begins with a single step.",
    "Tokenizers split text into pieces; some pieces are words, others are sub-words or bytes.",
    "\"Quoted text,\" she said, 'and single quotes' too; plus `backticks` and <angle brackets>.",
    "Numbers like 3.14159, 2.71828 and 1,000,000 appear often in technical writing.",
    "The committee's report, released on Tuesday, recommended sweeping changes to the tax code.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "Don't count your chickens before they hatch; it's wiser to wait and see what happens.",
    "I'M SURE IT'S FINE, YOU'RE OVERTHINKING IT, THEY'VE DONE THIS BEFORE, HE'D KNOW.",
    "Once upon a time, in a land far, far away, there lived a king who had three daughters.",
    "Machine learning models require large amounts of data, careful evaluation, and patience.",
    "The mitochondria is the powerhouse of the cell, or so the saying goes.",
    "All work and no play makes Jack a dull boy. All work and no play makes Jack a dull boy.",
    "rock'n'roll, ma'am, o'clock, y'all, 'twas, fo'c'sle, and ne'er-do-well are odd words.",
]

MULTILINGUAL = [
    "Le cœur a ses raisons que la raison ne connaît point. Où est la bibliothèque ?",
    "Ça va très bien, merci ! L'été dernier, nous sommes allés à la plage.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München!",
    "Straße, Größe, Äpfel, Öl, Übermut — die deutschen Umlaute sind schön.",
    "El niño comió una manzana y después jugó al fútbol con sus amigos. ¿Qué tal?",
    "¡Hola! ¿Cómo estás? Mañana será otro día, señor Muñoz.",
    "Mais que nada, sai da minha frente; eu quero passar. Não há problema, coração.",
    "Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε! Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "مرحبا بالعالم! هذه جملة باللغة العربية للاختبار.",
    "שלום עולם! זהו משפט בעברית לבדיקה.",
    "नमस्ते दुनिया! यह हिंदी में एक परीक्षण वाक्य है।",
    "স্বাগতম! এটি বাংলায় একটি পরীক্ষা বাক্য।",
    "สวัสดีชาวโลก นี่คือประโยคทดสอบภาษาไทย",
    "Xin chào thế giới! Đây là một câu thử nghiệm bằng tiếng Việt.",
    "Merhaba dünya! Bu Türkçe bir test cümlesidir; İstanbul'da ığdır şöyle.",
    "Witaj świecie! Zażółć gęślą jaźń.",
    "Ahoj světe! Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Sveika, pasaule! Ģērbšanās, čūska, ļoti ņemt.",
    "Բարեւ աշխարհ։ Ողջույն բոլորին։",
    "გამარჯობა მსოფლიო! ეს არის ტესტი.",
    "ሰላም ልዑል! ይህ የሙከራ ዓረፍተ ነገር ነው።",
    "Habari dunia! Hii ni sentensi ya majaribio kwa Kiswahili.",
    "Kaixo mundua! Hau euskarazko proba esaldi bat da.",
    "Hæ heimur! Þetta er íslensk prófunarsetning með ð og þ.",
    "Ṱhis ŧëxŧ ūşëş ḽǿŧş ǿf ḓīȧƈřīŧīƈş ȧƞḓ ƈǿḿƀīƞīƞɠ ḿȧřķş.",
    "e\u0301 a\u0300 o\u0302 u\u0308 n\u0303 c\u0327 — combining marks after base letters.",
]

CJK = [
    "你好，世界！这是一个中文测试句子。",
    "我们今天去公园散步，天气非常好。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "こんにちは世界！これは日本語のテスト文です。",
    "東京タワーは１９５８年に完成しました。カタカナとひらがなと漢字。",
    "吾輩は猫である。名前はまだ無い。",
    "안녕하세요 세계! 이것은 한국어 테스트 문장입니다.",
    "대한민국의 수도는 서울입니다. 한글은 세종대왕이 만들었습니다.",
    "繁體中文與简体中文混合使用，例如：臺灣、台湾。",
    "全角文字：ＡＢＣ１２３！？　（括弧）【かっこ】「引用」",
    "𠀀𠀁𠀂 are CJK Extension B characters; 㐀㐁 are Extension A.",
]

EMOJI = [
    "😀😃😄😁😆😅😂🤣", "👍👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦 family, 👩‍❤️‍💋‍👨 kiss, 🏳️‍🌈 flag",
    "🇺🇸🇬🇧🇫🇷🇩🇪🇯🇵🇨🇳", "1️⃣2️⃣3️⃣#️⃣*️⃣", "❤️ ♥ ☺️ ☺ ✌️ ✌", "🧑‍💻 coding, 👩🏽‍🚀 astronaut, 🧑🏿‍🤝‍🧑🏻",
    "🐶🐱🐭🐹🐰🦊🐻🐼", "I love 🍕 and 🍣! 🎉🎊", "👁️‍🗨️ 🏴‍☠️ 🐻‍❄️", "🫠🫡🫢🫣🫤🥹", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3)); // 5\n",
    "{\"name\": \"quarrel\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"gguf\"], \"ok\": true, \"n\": null}",
    "<html>\n  <body>\n    <p class=\"x\">Hi &amp; bye</p>\n  </body>\n</html>\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares of evens\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "if [ -f ~/.bashrc ]; then\n  source ~/.bashrc\nfi\necho $PATH | tr ':' '\\n'\n",
    "    indented four\n        indented eight\n\t\ttabbed\n  \n",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k&=l;m|=n;o^=p;q<<=r;s>>=t;",
    "std::vector<std::pair<int, std::string>> v{{1, \"one\"}, {2, \"two\"}};",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    '''Docstring.'''\n    __slots__ = ('a',)\n",
    "diff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,4 @@\n-old\n+new\n",
]

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>",
    "<pad>", "<unk>", "<mask>", "[multimodal]", "<unused0>", "<unused99>", "<reponame>", "<file_sep>",
    "<jupyter_code>", "<empty_output>", "<s>", "</s>", "<|eot_id|>", "<start_of_image>", "<end_of_image>",
]

WORDS = ("the of and to in is was for on that with as by at from his her they we you it not be are this have had "
         "one all were when there can an which their said if do will each about how up out them then she many "
         "some so these would other into has more two like him see time could no make than first been its who "
         "now people my made over did down only way find use may water long little very after words called just "
         "where most know get through back much go good new write our used me man too any day same right look "
         "think also around another came come work three word must because does part even place well such").split()

WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028",
              "\u0085", "\x0b", "\x0c", "\r"]

# Code point ranges assigned long before Unicode 15 (so every Unicode table agrees on them).
CPT_RANGES = [
    (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x180, 0x24F), (0x250, 0x2AF), (0x300, 0x36F),
    (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x5D0, 0x5EA), (0x620, 0x64A), (0x660, 0x669),
    (0x900, 0x97F), (0xE01, 0xE3A), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x2000, 0x206F),
    (0x2070, 0x209C), (0x20A0, 0x20BF), (0x2100, 0x214F), (0x2150, 0x218B), (0x2190, 0x21FF), (0x2200, 0x22FF),
    (0x2500, 0x257F), (0x25A0, 0x25FF), (0x2600, 0x26FF), (0x3000, 0x303F), (0x3041, 0x3096), (0x30A0, 0x30FF),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xFF01, 0xFF5E), (0x1F300, 0x1F5FF),
    (0x1F600, 0x1F64F), (0x1D400, 0x1D4FF), (0x20000, 0x2A6D6),
]


def llama_decode_ok(b: bytes) -> bool:
    """True unless llama.cpp's lenient UTF-8 decoder yields a code point above U+10FFFF."""
    i, n = 0, len(b)
    while i < n:
        c = b[i]
        if c < 0x80:
            i += 1
        elif c < 0xC0:
            i += 1
        elif c < 0xE0:
            i += 2 if i + 1 < n and b[i + 1] & 0xC0 == 0x80 else 1
        elif c < 0xF0:
            i += 3 if i + 2 < n and b[i + 1] & 0xC0 == 0x80 and b[i + 2] & 0xC0 == 0x80 else 1
        elif c < 0xF8:
            if i + 3 < n and all(b[i + k] & 0xC0 == 0x80 for k in (1, 2, 3)):
                cpt = ((c & 7) << 18) | ((b[i + 1] & 0x3F) << 12) | ((b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F)
                if cpt > 0x10FFFF:
                    return False
                i += 4
            else:
                i += 1
        else:
            i += 1
    return True


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.items = []

    def add(self, kind, data):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        assert llama_decode_ok(data), data
        self.items.append((kind, data))

    def rand_cpt(self):
        lo, hi = self.r.choice(CPT_RANGES)
        return chr(self.r.randint(lo, hi))

    def words(self, n):
        return " ".join(self.r.choice(WORDS) for _ in range(n))

    def invalid(self):
        r = self.r
        pieces = [
            b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80",
            b"\xed\xbf\xbf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
            b"\xfe\xff", b"\xef\xbb\xbf", b"\xf4\x8f\xbf\xbf", b"\xc2", b"\xe3\x81", bytes([r.randint(0x80, 0xFF)]),
        ]
        out = b""
        for _ in range(r.randint(1, 6)):
            if r.random() < 0.5:
                out += r.choice(pieces)
            else:
                out += r.choice(ENGLISH + MULTILINGUAL + CJK)[: r.randint(0, 20)].encode()
        return out

    def build(self, n_target):
        r = self.r
        for s in ["", " ", "  ", "\n", "\t", "\r\n", " \n ", "a", "A", "'", "\u00a0", "\u3000"]:
            self.add("empty_or_tiny", s)
        for s in ENGLISH:
            self.add("english", s)
            self.add("english", " " + s)
            self.add("english", s.lower())
        for s in MULTILINGUAL:
            self.add("multilingual", s)
            self.add("multilingual", " " + s + "\n")
        for s in CJK:
            self.add("cjk", s)
        for s in EMOJI:
            self.add("emoji", s)
        for s in CODE:
            self.add("code", s)
        for s in SPECIALS:
            self.add("special", s)
            self.add("special", " " + s)
            self.add("special", s + " ")
            self.add("special", "Hello " + s + " world")
        chat = ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n"
                "<|im_start|>assistant\n",
                "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
                "<|im_start|><|im_end|><|im_start|>", "<<bos>>", "<bos><bos>", "<|im_start", "im_start|>",
                "<start_of_turn", "text<|endoftext|>more<|endoftext|>", "<s>[INST] hi [/INST]</s>",
                "<|im_start|> user <|im_end|>", "\n<end_of_turn>\n\n<start_of_turn>\n", "<unused0><unused1>x"]
        for s in chat:
            self.add("special", s)
        for i in range(1, 70):
            self.add("digits", str(r.randint(0, 10 ** (i % 23))))
        for _ in range(40):
            self.add("digits", r.choice(["", "$", "v", "#"]) + ".".join(str(r.randint(0, 999)) for _ in range(r.randint(1, 4))))
            self.add("digits", f"{r.randint(1, 12)}/{r.randint(1, 28)}/{r.randint(1900, 2100)} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}")
            self.add("digits", "+1 (%03d) %03d-%04d" % (r.randint(0, 999), r.randint(0, 999), r.randint(0, 9999)))
            self.add("digits", "".join(r.choice("0123456789٠١٢٣٤٥٦٧٨٩०१२३४५६७८९①②③½¼²³") for _ in range(r.randint(1, 30))))
        for n in (1, 2, 3, 7, 16, 33, 64, 100, 257):
            for ws in ("\n", " ", "\t", "\r\n", " \n", "\u3000"):
                self.add("whitespace", ws * n)
                self.add("whitespace", "x" + ws * n + "y")
                self.add("whitespace", ws * n + "word")
                self.add("whitespace", "word" + ws * n)
        for _ in range(120):
            self.add("whitespace", "".join(r.choice(WHITESPACE) + (r.choice(WORDS) if r.random() < 0.5 else "")
                                           for _ in range(r.randint(1, 12))))
        for w in ["supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
                  "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
                  "antidisestablishmentarianism", "a" * 300, "ab" * 200, "Z" * 77, "é" * 90, "中" * 120,
                  "🙂" * 50, "!" * 64, "." * 100, "-" * 80, "=" * 40, "_" * 33, "0" * 100]:
            self.add("long_word", w)
        for _ in range(60):
            self.add("long_word", "".join(r.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                                          for _ in range(r.randint(20, 400))))
        for _ in range(200):
            self.add("invalid_utf8", self.invalid())
        for c in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D"]:
            self.add("contraction", "it" + c + " " + c + " x" + c + "y")
        # fill with mixes up to the target
        kinds = ["english_words", "mixed", "random_cpts", "punct", "mixed_invalid"]
        while len(self.items) < n_target:
            k = r.choice(kinds)
            if k == "english_words":
                s = self.words(r.randint(1, 60))
                if r.random() < 0.3:
                    s = s.capitalize() + r.choice([".", "!", "?", "...", ",", ";"])
                if r.random() < 0.2:
                    s = s.upper()
                self.add(k, s)
            elif k == "mixed":
                parts = []
                for _ in range(r.randint(1, 8)):
                    src = r.choice([ENGLISH, MULTILINGUAL, CJK, EMOJI, CODE, SPECIALS, WHITESPACE])
                    t = r.choice(src)
                    if len(t) > 20 and r.random() < 0.5:
                        a = r.randint(0, len(t) - 1)
                        t = t[a:a + r.randint(1, 40)]
                    parts.append(t)
                self.add(k, "".join(parts))
            elif k == "random_cpts":
                self.add(k, "".join(self.rand_cpt() for _ in range(r.randint(1, 40))))
            elif k == "punct":
                self.add(k, "".join(r.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \n¡¿«»—–…•·") for _ in range(r.randint(1, 40))))
            else:
                s = r.choice(ENGLISH + MULTILINGUAL + CODE).encode()
                pos = r.randint(0, len(s))
                self.add(k, s[:pos] + self.invalid() + s[pos:])
        return self.items


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default=str(ROOT / "tests/data/tokenizer/corpus.jsonl"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("-n", type=int, default=2400, help="number of strings (at least the fixed ones)")
    ap.add_argument("--seeds", help="also write every 50th string into this folder (fuzzer seeds)")
    a = ap.parse_args()
    items = Gen(a.seed).build(a.n)
    if a.seeds:
        seeds = pathlib.Path(a.seeds)
        seeds.mkdir(parents=True, exist_ok=True)
        for i in range(0, len(items), 50):
            (seeds / f"seed_{i:04d}").write_bytes(items[i][1])
    out = pathlib.Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for i, (kind, data) in enumerate(items):
            f.write(json.dumps({"id": i, "kind": kind, "hex": data.hex()}) + "\n")
    print(f"wrote {len(items)} strings to {out}")


if __name__ == "__main__":
    main()
