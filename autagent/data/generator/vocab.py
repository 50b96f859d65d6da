"""The embedded benchmark's vocabularies: voices, sentences, sounds, instruments, and the phrasing
pools of every question kind.  They live here and nowhere else: neither the reasoner nor any tool
imports this module or mirrors its tables (a test checks the imports).

Everything that a test split could memorise comes in two disjoint pools, ``train`` (train and dev
splits) and ``test``: question phrasings, speaking voices and spoken sentences.
"""

from __future__ import annotations

# ---- voices (espeak-ng language + variant); the tools' calibration voices are none of these ------------
VOICES = {
    "train": ("en-us", "en-us+m1", "en-us+f2", "en-gb+m3", "en-gb+f1", "en-gb-x-rp+m4", "en-us+m5", "en-gb-scotland"),
    "test": ("en-gb+f5", "en-us+m6", "en-gb-x-rp+f4", "en-gb-scotland+f2", "en-029+m7", "en-us+f4"),
}

# ---- spoken content ---------------------------------------------------------------------------------
SENTENCES = {
    "train": (
        "Please remember to bring the blue umbrella tomorrow",
        "The museum opens at nine on Sunday morning",
        "My brother repaired the old bicycle in the garage",
        "We watched the sunset from the top of the hill",
        "The bakery on the corner sells fresh bread",
        "She forgot her keys in the taxi again",
        "The train to the airport leaves from platform four",
        "Our teacher told a story about a brave sailor",
        "The garden needs water after this hot week",
        "He plays chess with his grandfather every evening",
        "The children built a castle out of sand",
        "Turn left at the church and follow the river",
        "The concert was cancelled because of the storm",
        "I ordered soup and a green salad for lunch",
        "The library will be closed during the holiday",
        "A small dog was sleeping under the table",
    ),
    "test": (
        "The farmer sold apples at the market on Friday",
        "Our neighbours painted their fence bright yellow",
        "The pilot announced a short delay before landing",
        "My sister keeps her photographs in a wooden box",
        "The soup tasted better with a little pepper",
        "They missed the bus and walked to the stadium",
        "A heavy wind knocked the letters off the desk",
        "The doctor asked him to rest for three days",
        "We found an old map inside the attic",
        "The baker closes the shop early on Mondays",
    ),
}
KEYWORDS = {  # one content word of each sentence above, in the same order
    "train": (
        "umbrella",
        "museum",
        "bicycle",
        "sunset",
        "bakery",
        "taxi",
        "airport",
        "sailor",
        "garden",
        "chess",
        "castle",
        "river",
        "storm",
        "salad",
        "library",
        "dog",
    ),
    "test": ("apples", "fence", "pilot", "photographs", "pepper", "stadium", "letters", "doctor", "map", "shop"),
}
COUNT_WORDS = {
    "train": ("coffee", "tomorrow", "window", "yellow", "music", "paper"),
    "test": ("orange", "tuesday", "garden", "silver"),
}
COUNT_FILLERS = ("I think", "and then", "we said", "after that", "you know", "maybe")
INTENTS = {  # intent label -> utterances that carry it
    "asking for directions": {
        "train": (
            "Excuse me, how do I get to the train station from here",
            "Could you tell me which way the post office is",
        ),
        "test": ("Sorry, is the hospital somewhere near this road",),
    },
    "ordering food": {
        "train": (
            "I would like a cheese sandwich and a cup of tea please",
            "Can I have the pasta with a glass of water",
        ),
        "test": ("Two bowls of noodle soup for our table please",),
    },
    "apologising": {
        "train": ("I am so sorry I broke your favourite cup", "Please forgive me for being late again"),
        "test": ("I apologise, I should not have shouted at you",),
    },
    "complaining about the weather": {
        "train": (
            "It has not stopped raining for a whole week and I am fed up",
            "This heat is unbearable, I cannot sleep at all",
        ),
        "test": ("Another grey cold morning, I hate this weather",),
    },
    "inviting someone": {
        "train": ("Would you like to come to my birthday party on Saturday", "Join us for dinner at our place tonight"),
        "test": ("We are having a picnic on Sunday, you should come",),
    },
    "thanking someone": {
        "train": ("Thank you so much for helping me move the boxes", "I really appreciate you looking after my cat"),
        "test": ("Thanks a lot for the lovely present",),
    },
}
# Emotions as an actor would play them: offsets from the voice's own rate, pitch and loudness.
EMOTION_ACTING = {
    "neutral": dict(rate=0, pitch=0, amplitude=0, gap=0),
    "happy": dict(rate=20, pitch=25, amplitude=30, gap=0),
    "sad": dict(rate=-45, pitch=-20, amplitude=-40, gap=3),
    "angry": dict(rate=35, pitch=10, amplitude=80, gap=0),
}
EMOTION_WORDS = {
    "neutral": ("neutral", "matter-of-fact", "emotionless"),
    "happy": ("happy", "cheerful", "joyful"),
    "sad": ("sad", "gloomy", "sorrowful"),
    "angry": ("angry", "furious", "irritated"),
}
AROUSAL = {"neutral": -1, "happy": 1, "sad": -1, "angry": 1}  # low: neutral and sad; high: happy and angry

# ---- sounds -------------------------------------------------------------------------------------------
# name -> (family, how to make it, names used in choices)
EVENTS = {
    "bird": ("animal", ("gm", 123), ("birds chirping", "a bird singing", "birdsong")),
    "seashore": ("nature", ("gm", 122), ("waves on a shore", "the sea", "surf breaking")),
    "rain": ("nature", ("rain", 0), ("rain falling", "a rain shower", "raindrops")),
    "wind": ("nature", ("wind", 0), ("strong wind", "wind blowing", "a gale")),
    "thunder": ("nature", ("thunder", 0), ("thunder", "a thunderstorm rumbling", "thunderclaps")),
    "telephone": ("signal", ("gm", 124), ("a telephone ringing", "a ringing phone", "a phone call coming in")),
    "siren": ("signal", ("siren", 0), ("a siren", "an emergency siren wailing", "a police siren")),
    "beeping": ("signal", ("beeping", 0), ("an electronic beeping", "an alarm beeping", "a beeping device")),
    "doorbell": ("signal", ("doorbell", 0), ("a doorbell", "someone ringing the doorbell", "a door chime")),
    "clock": ("signal", ("clock", 0), ("a clock ticking", "a ticking clock", "the tick of a clock")),
    "applause": ("human", ("gm", 126), ("applause", "people clapping", "an audience applauding")),
    "crowd": ("human", ("crowd", 0), ("a crowd talking", "people chattering", "a busy room full of voices")),
    "footsteps": ("human", ("footsteps", 0), ("footsteps", "someone walking", "steps on a hard floor")),
    "typing": ("human", ("typing", 0), ("typing on a keyboard", "keys being typed", "a keyboard clattering")),
    "helicopter": ("vehicle", ("gm", 125), ("a helicopter", "a helicopter flying over", "rotor blades")),
    "engine": ("vehicle", ("engine", 0), ("an engine idling", "a running motor", "a car engine")),
    "gunshot": ("vehicle", ("gm", 127), ("gunshots", "shots being fired", "a gun firing")),
}
# ---- recorded animal sounds: real recordings from Debian's tuxpaint-stamps-default --------------------
# name -> ({pool: recordings under RECORDINGS}, names used in choices).  The two pools hear different
# recordings (a class with a single recording belongs to one pool only), so test clips are never heard
# in training; an animal of one pool can still be named as a distractor in the other.
RECORDINGS = "/usr/share/tuxpaint/stamps"
ANIMALS = {
    "songbird": (
        {"train": ("animals/birds/blackbird.ogg",), "test": ("animals/birds/lark.ogg",)},
        ("a bird singing", "a songbird", "birdsong"),
    ),
    "duck": (
        {"train": ("animals/birds/duck.ogg",), "test": ("animals/birds/drake.ogg",)},
        ("a duck quacking", "ducks", "quacking"),
    ),
    "chicken": (
        {"train": ("animals/birds/hen.ogg",), "test": ("animals/birds/rooster.ogg",)},
        ("a chicken", "poultry", "a hen or rooster"),
    ),
    "cow": (
        {"train": ("animals/mammals/bovines/cow.ogg",), "test": ("animals/mammals/bovines/cow_white.ogg",)},
        ("a cow mooing", "cattle", "a cow"),
    ),
    "sheep": (
        {"train": ("animals/mammals/bovines/sheep.ogg",), "test": ("animals/mammals/bovines/sheep_lamb.ogg",)},
        ("a sheep", "a lamb bleating", "sheep"),
    ),
    "goat": (
        {"train": ("animals/mammals/bovines/goat.ogg",), "test": ("animals/mammals/bovines/mountaingoat.ogg",)},
        ("a goat", "a bleating goat", "goats"),
    ),
    "pig": (
        {
            "train": ("animals/mammals/pig.ogg", "animals/mammals/pig_golden2.ogg"),
            "test": ("animals/mammals/pig_golden.ogg",),
        },
        ("a pig", "a pig grunting", "pigs oinking"),
    ),
    "big_cat": (
        {"train": ("animals/mammals/cats/lion.ogg",), "test": ("animals/mammals/cats/tiger.ogg",)},
        ("a big cat roaring", "a roaring wild cat", "a large cat's roar"),
    ),
    "buzzing_insect": (
        {"train": ("animals/insects/bee.ogg",), "test": ("animals/insects/hornet.ogg", "animals/insects/mosquito.ogg")},
        ("a buzzing insect", "an insect buzzing", "something buzzing like a bee"),
    ),
    "dog": ({"train": ("animals/mammals/dogs/dog.ogg",), "test": ()}, ("a dog", "a dog barking", "a barking dog")),
    "horse": ({"train": ("animals/mammals/equines/horse.ogg",), "test": ()}, ("a horse", "a horse neighing", "horses")),
    "turkey": ({"train": ("animals/birds/turkey.ogg",), "test": ()}, ("a turkey", "a turkey gobbling", "turkeys")),
    "elephant": (
        {"train": ("animals/mammals/elephant.ogg",), "test": ()},
        ("an elephant", "an elephant trumpeting", "elephants"),
    ),
    "crow": ({"train": (), "test": ("animals/birds/crow.ogg",)}, ("a crow", "a crow cawing", "crows")),
    "frog": ({"train": (), "test": ("animals/amphibians/frog.ogg",)}, ("a frog", "a frog croaking", "frogs")),
    "whale": (
        {"train": (), "test": ("animals/mammals/aquatic/whale.ogg",)},
        ("a whale", "whale song", "a whale calling"),
    ),
    "owl": ({"train": (), "test": ("animals/birds/owl.ogg",)}, ("an owl", "an owl hooting", "owls")),
}
SCENES = {
    "beach": (("seashore", "bird", "wind"), ("at the beach", "by the seaside", "on a shore")),
    "street": (("engine", "siren", "footsteps"), ("on a busy street", "in city traffic", "at a road junction")),
    "office": (("typing", "telephone", "clock"), ("in an office", "at a workplace desk", "in a study room")),
    "storm": (("rain", "thunder", "wind"), ("outside in a storm", "during bad weather", "in a downpour")),
    "party": (("crowd", "applause", "footsteps"), ("at a party", "at a crowded event", "at a celebration")),
}

# ---- music ---------------------------------------------------------------------------------------------
INSTRUMENTS = {  # name -> (family, General MIDI program, names used in choices)
    "piano": ("keyboard", 0, ("piano", "a piano", "an acoustic piano")),
    "organ": ("keyboard", 19, ("organ", "a church organ", "a pipe organ")),
    "accordion": ("keyboard", 21, ("accordion", "an accordion", "a squeezebox")),
    "violin": ("bowed", 40, ("violin", "a violin", "a fiddle")),
    "cello": ("bowed", 42, ("cello", "a cello", "a violoncello")),
    "guitar": ("plucked", 24, ("acoustic guitar", "a guitar", "an acoustic guitar")),
    "banjo": ("plucked", 105, ("banjo", "a banjo", "a five-string banjo")),
    "harp": ("plucked", 46, ("harp", "a harp", "a concert harp")),
    "trumpet": ("brass", 56, ("trumpet", "a trumpet", "a brass trumpet")),
    "trombone": ("brass", 57, ("trombone", "a trombone", "a slide trombone")),
    "flute": ("woodwind", 73, ("flute", "a flute", "a wooden flute")),
    "clarinet": ("woodwind", 71, ("clarinet", "a clarinet", "a reed clarinet")),
    "saxophone": ("woodwind", 65, ("saxophone", "a saxophone", "a sax")),
    "xylophone": ("mallet", 13, ("xylophone", "a xylophone", "a mallet xylophone")),
    "marimba": ("mallet", 12, ("marimba", "a marimba", "a wooden marimba")),
}
ROOTS = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
QUALITIES = {"major": (0, 4, 7), "minor": (0, 3, 7)}
NOTE_NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
CONTOURS = {
    "rising": ("it goes up", "the melody rises", "ascending"),
    "falling": ("it goes down", "the melody falls", "descending"),
    "arch": ("up and then down", "it rises then falls", "an arch shape"),
    "valley": ("down and then up", "it falls then rises", "a dip in the middle"),
}
TEMPO_WORDS = {
    "slow": ("slow", "a slow pace", "leisurely"),
    "fast": ("fast", "a fast pace", "brisk"),
    "moderate": ("moderate", "a medium pace", "walking pace"),
}
REGISTER_WORDS = {"low": ("low", "a low-pitched tone", "deep"), "high": ("high", "a high-pitched tone", "shrill")}
AUDIO_KINDS = {
    "speech": ("someone talking", "people conversing", "a person speaking"),
    "music": ("a piece of music", "instrumental music", "someone playing an instrument"),
    "sound": ("everyday sounds with no speech or music", "environmental noise", "sound effects"),
}
