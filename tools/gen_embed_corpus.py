#!/usr/bin/env python3
"""Writes tests/data/embed/multilingual.jsonl: the multilingual embedding corpus (issue 35).

1,200 lines, deterministic (seeded): sentences in many scripts (Latin with diacritics, Cyrillic,
Greek, Arabic, Persian, Hebrew, Devanagari, Bengali, Tamil, Thai, Georgian, Armenian, Ethiopic, CJK,
kana, Hangul), emoji (with ZWJ sequences and skin tones), code, numbers and symbols, text with
control / format / combining code points and decomposed (NFD) forms, mixed-script lines, and long
paragraphs (up to ~600 word pieces, past MiniLM's 256-token limit, so truncation is exercised).
Each line is {"id": N, "text": ..., "kind": ...}.

usage: tools/gen_embed_corpus.py [-o tests/data/embed/multilingual.jsonl]
"""
import argparse
import json
import pathlib
import random
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parents[1]

SENTENCES = {
    "en": ["The quick brown fox jumps over the lazy dog.", "How do I reset my password after the update?",
           "Rainfall in the northern valleys doubled compared with last spring.",
           "She finally finished the marathon in three hours and twelve minutes.",
           "Please send the signed contract back before Friday afternoon.",
           "A committee of engineers reviewed the bridge's load calculations.",
           "Photosynthesis turns light into chemical energy stored in sugars.",
           "The museum reopened its ancient manuscripts gallery last week."],
    "fr": ["Le petit déjeuner est servi de sept heures à dix heures.", "Où se trouve la gare la plus proche, s'il vous plaît ?",
           "Les élèves ont étudié l'histoire de la Révolution française.", "Ça fait déjà trois ans que j'habite à Montréal.",
           "Noël approche et les rues sont décorées de guirlandes lumineuses.",
           "L'œuvre de Molière reste étonnamment moderne aujourd'hui."],
    "de": ["Die Straßenbahn fährt alle zehn Minuten über die Brücke.", "Können Sie mir bitte den Weg zum Bahnhof erklären?",
           "Übermorgen beginnt das große Musikfestival im Schlosspark.",
           "Die Donaudampfschifffahrtsgesellschaftskapitänsmütze liegt im Schrank.",
           "Äpfel, Öl und Müsli stehen auf der Einkaufsliste."],
    "es": ["¿Dónde está la biblioteca más cercana?", "El niño comió una manzana después de la escuela.",
           "¡Qué sorpresa verte aquí en Cartagena!", "La cigüeña construyó su nido sobre el campanario."],
    "pt": ["A criança brincou no jardim até o anoitecer.", "Você já visitou as cataratas do Iguaçu?",
           "As eleições municipais acontecerão em outubro."],
    "vi": ["Tôi muốn đặt một bàn cho hai người tối nay.", "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
           "Những cơn mưa mùa hạ thường đến rất bất ngờ.", "Phở bò là món ăn sáng phổ biến ở miền Bắc."],
    "tr": ["İstanbul'un tarihi yarımadası çok kalabalıktı.", "Işık ılık ılık süzülüyordu pencereden.",
           "Öğrenciler sınav sonuçlarını heyecanla bekliyor.", "Çay bahçesinde iki saat sohbet ettik."],
    "pl": ["Zażółć gęślą jaźń, powiedział nauczyciel.", "W Krakowie znajduje się jeden z najstarszych uniwersytetów.",
           "Pociąg do Gdańska odjeżdża z peronu trzeciego."],
    "cs": ["Příliš žluťoučký kůň úpěl ďábelské ódy.", "Praha je hlavní město České republiky."],
    "ro": ["Științele exacte îi plăceau încă din copilărie.", "Vântul bătea puternic peste câmpie."],
    "hu": ["Árvíztűrő tükörfúrógép a műhely sarkában.", "A Duna Budapestet két részre osztja."],
    "is": ["Þjóðin fagnaði sjálfstæðinu með söng og dansi.", "Ég hef aldrei séð jafn fallegt norðurljós."],
    "ru": ["Съешь же ещё этих мягких французских булок, да выпей чаю.", "Москва — столица Российской Федерации.",
           "Вчера вечером мы долго гуляли по набережной.", "Сколько стоит билет до Санкт-Петербурга?",
           "Ёлка стояла в углу, украшенная игрушками."],
    "uk": ["Київ розташований на берегах Дніпра.", "Ґанок старої хати заріс виноградом.",
           "Щастя не купиш, але його можна знайти."],
    "bg": ["София е най-големият град в България.", "Обичам да чета книги през зимните вечери."],
    "sr": ["Београд лежи на ушћу Саве у Дунав.", "Љубав и пријатељство су најважнији."],
    "el": ["Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
           "Το καλοκαίρι πηγαίνουμε συχνά στα νησιά του Αιγαίου.", "Πόσο κοστίζει αυτό το βιβλίο;",
           "ΑΥΤΟ ΕΙΝΑΙ ΕΝΑ ΚΕΙΜΕΝΟ ΜΕ ΚΕΦΑΛΑΙΑ ΓΡΑΜΜΑΤΑ."],
    "ar": ["القاهرة هي عاصمة جمهورية مصر العربية.", "أين تقع أقرب محطة للقطار؟",
           "قرأتُ كتاباً جميلاً عن تاريخ الأندلس.", "يُعَدُّ الخَطُّ العَرَبِيُّ فَنّاً عَرِيقاً.",
           "الطقس اليوم مشمس مع رياح خفيفة."],
    "fa": ["تهران پایتخت ایران است.", "من هر روز صبح چای می‌نوشم.", "کتاب‌های زیادی در کتابخانه وجود دارد."],
    "ur": ["پاکستان کا دارالحکومت اسلام آباد ہے۔", "مجھے اردو شاعری بہت پسند ہے۔"],
    "he": ["ירושלים היא עיר עתיקה וחשובה.", "שלום, מה שלומך היום?", "הספרייה נפתחת בשעה תשע בבוקר.",
           "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ."],
    "hi": ["भारत एक विशाल और विविधतापूर्ण देश है।", "मुझे हिंदी में किताबें पढ़ना अच्छा लगता है।",
           "कल सुबह बारिश होने की संभावना है।", "दिल्ली की सड़कों पर बहुत भीड़ थी।",
           "की", "क्षत्रिय, ज्ञान, श्रीमान और द्वार जैसे संयुक्ताक्षर।"],
    "mr": ["मुंबई ही महाराष्ट्राची राजधानी आहे.", "आम्ही उद्या गडावर फिरायला जाणार आहोत."],
    "ne": ["काठमाडौं नेपालको राजधानी हो।", "हिमालयको दृश्य अत्यन्त सुन्दर छ।"],
    "bn": ["বাংলাদেশের রাজধানী ঢাকা।", "আমি প্রতিদিন সকালে রবীন্দ্রসঙ্গীত শুনি।", "নদীর তীরে একটি ছোট গ্রাম আছে।"],
    "pa": ["ਪੰਜਾਬ ਦੀ ਧਰਤੀ ਬਹੁਤ ਉਪਜਾਊ ਹੈ।", "ਮੈਂ ਕੱਲ੍ਹ ਅੰਮ੍ਰਿਤਸਰ ਜਾਵਾਂਗਾ।"],
    "gu": ["ગુજરાતની રાજધાની ગાંધીનગર છે.", "આજે હવામાન ખૂબ સરસ છે."],
    "ta": ["சென்னை தமிழ்நாட்டின் தலைநகரம்.", "நான் தினமும் காலையில் நடைப்பயிற்சி செய்கிறேன்."],
    "te": ["హైదరాబాద్ తెలంగాణ రాజధాని.", "నాకు తెలుగు సినిమాలు అంటే ఇష్టం."],
    "kn": ["ಬೆಂಗಳೂರು ಕರ್ನಾಟಕದ ರಾಜಧಾನಿ.", "ಮಳೆಗಾಲದಲ್ಲಿ ಜಲಪಾತಗಳು ಸುಂದರವಾಗಿರುತ್ತವೆ."],
    "ml": ["കേരളം ദൈവത്തിന്റെ സ്വന്തം നാട് എന്നറിയപ്പെടുന്നു.", "ഞാൻ ചായ കുടിക്കുന്നു."],
    "si": ["ශ්‍රී ලංකාව ලස්සන දිවයිනකි.", "මම අද පාසල් යනවා."],
    "th": ["กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย", "ฉันชอบกินข้าวเหนียวมะม่วงมาก",
           "วันนี้อากาศร้อนมากจนต้องเปิดแอร์ทั้งวัน", "ภาษาไทยมีวรรณยุกต์ห้าเสียง"],
    "lo": ["ວຽງຈັນແມ່ນນະຄອນຫຼວງຂອງລາວ.", "ຂ້ອຍມັກກິນເຂົ້າໜຽວ."],
    "km": ["ភ្នំពេញជារាជធានីនៃប្រទេសកម្ពុជា។", "ខ្ញុំចូលចិត្តអានសៀវភៅ។"],
    "my": ["ရန်ကုန်မြို့သည် မြန်မာနိုင်ငံ၏ အကြီးဆုံးမြို့ဖြစ်သည်။"],
    "ka": ["თბილისი საქართველოს დედაქალაქია.", "ქართული ანბანი ძალიან ლამაზია."],
    "hy": ["Երևանը Հայաստանի մայրաքաղաքն է։", "Արարատ լեռը երևում է քաղաքից։"],
    "am": ["አዲስ አበባ የኢትዮጵያ ዋና ከተማ ናት።", "ቡና በኢትዮጵያ ታሪክ ውስጥ ትልቅ ቦታ አለው።"],
    "zh": ["北京是中华人民共和国的首都。", "我每天早上喝一杯绿茶。", "今天的天气非常好，我们去公园散步吧！",
           "機器學習需要大量的資料。", "长城是世界上最著名的建筑之一。", "𠀀𠀁𪚥 are rare CJK Extension B characters."],
    "ja": ["東京は日本の首都です。", "今日はとても暑いですね。", "ひらがなとカタカナと漢字を使って書きます。",
           "コンピューターのプログラミングを勉強しています。", "ｶﾀｶﾅの半角文字と全角ＡＢＣ１２３。"],
    "ko": ["한국", "서울은 대한민국의 수도입니다.", "오늘 날씨가 정말 좋네요.", "저는 매일 아침 커피를 마십니다.",
           "한글은 세종대왕이 만든 문자입니다.", "김치찌개와 불고기를 먹었어요."],
    "emoji": ["I love pizza 🍕🍕 and sushi 🍣!", "Family: 👨‍👩‍👧‍👦, thumbs up 👍🏽, flag 🇯🇵.",
              "😀😃😄😁😆😅😂🤣", "Weather today: ☀️ then 🌧️ and ⛈️ later.", "❤️🔥✨🎉🚀",
              "Rocket launch 🚀 at 10:30 — don't miss it 👀"],
    "code": ["def fibonacci(n): return n if n < 2 else fibonacci(n-1) + fibonacci(n-2)",
             "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
             "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
             "const url = `https://example.com/api/v2/items?id=${id}&sort=desc`;",
             "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
             "git commit -m 'fix: handle UTF-8 in tokenizer' && git push origin main",
             "<div class=\"note\">Hello &amp; welcome</div>", "x = np.linalg.norm(a - b, axis=1) ** 2"],
    "symbols": ["Price: $3.50 → €3.20 (−8.6%), ≈ ¥520.", "E = mc² and ∑ᵢ xᵢ² ≤ ∞", "Temperature −40 °C equals −40 °F.",
                "№ 42, § 3, ¶ 7, © 2026, ™, ®", "½ + ¼ = ¾", "1,234,567.89 vs 1.234.567,89"],
    "tricky": ["he\u200bllo wor\u200dld", "tab\there\nnew line\r\nwindows", "caf\u0065\u0301 vs caf\u00e9",
               "\u0041\u030a vs \u00c5 vs \u212b", "soft\u00adhyphen and non\u00a0breaking space",
               "unit\u001fseparator, bell\u0007 and escape\u001b[0m", "ﬁ ligature, ＦＵＬＬＷＩＤＴＨ, ①②③",
               "ǅungla, ǈubljana, İstanbul, DİYARBAKIR", "\ufeffBOM at start", "private use \ue000\uf8ff here",
               "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐ text", "a\u0303\u0323 and ạ̃ (order of marks)"],
}

LONG_TOPICS = ["en", "fr", "de", "ru", "el", "ar", "hi", "bn", "th", "zh", "ja", "ko", "he", "vi"]


def build(n_lines=1200, seed=35):
    rng = random.Random(seed)
    langs = sorted(SENTENCES)
    out = []
    # every base sentence once, as it is
    for lang in langs:
        for s in SENTENCES[lang]:
            out.append((s, lang))
    # NFD forms of some accented ones (same meaning, other code points)
    for lang in ("fr", "vi", "ko", "de"):
        for s in SENTENCES[lang][:2]:
            out.append((unicodedata.normalize("NFD", s), f"{lang}-nfd"))
    # long paragraphs: 10..45 sentences of one language (past 256 word pieces for most)
    for i in range(60):
        lang = LONG_TOPICS[i % len(LONG_TOPICS)]
        k = rng.randint(10, 45)
        out.append((" ".join(rng.choice(SENTENCES[lang]) for _ in range(k)), f"{lang}-long"))
    # a long line of one repeated word, and a word over 100 characters
    out.append(("supercalifragilistic " * 300, "long-repeat"))
    out.append(("x" * 150 + " tail", "long-word"))
    # the rest: 1..4 sentences, sometimes from several languages, with light variations
    while len(out) < n_lines:
        k = rng.randint(1, 4)
        picks = [rng.choice(langs)] if rng.random() < 0.6 else rng.sample(langs, k)
        parts = [rng.choice(SENTENCES[rng.choice(picks)]) for _ in range(k)]
        text = " ".join(parts)
        r = rng.random()
        if r < 0.1:
            text = text.upper()
        elif r < 0.2:
            text = text.lower()
        elif r < 0.25:
            text = f"{rng.randint(1, 99999)}. {text}"
        out.append((text, "mixed" if len(set(picks)) > 1 else picks[0]))
    return out[:n_lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=pathlib.Path, default=ROOT / "tests/data/embed/multilingual.jsonl")
    a = ap.parse_args()
    rows = build()
    with open(a.output, "w", encoding="utf-8") as f:
        for i, (t, kind) in enumerate(rows):
            f.write(json.dumps({"id": i, "text": t, "kind": kind}, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} lines -> {a.output}")


if __name__ == "__main__":
    main()
