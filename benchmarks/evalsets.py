"""Retrieval evaluation sets for the search-quality benchmark: chat turns plus questions whose relevant turns are known.

    python -m benchmarks.evalsets --stats            # sizes and a BM25 recall@10 baseline per set
    python -m benchmarks.evalsets --out DIR          # DIR/<name>.jsonl: {"memory", "query", "relevant"} a line

Two sets, each an :class:`EvalSet` (memories of turns in conversation order, queries naming relevant turn ids):

* ``chatterbot``: real public dialogue from the PyPI package ``chatterbot-corpus`` (BSD-3-Clause), its
  English YAML files. One memory per category file holding the replies; each conversation's opening question
  is a query whose relevant turn is its first reply.
* ``dialogs``: generated long conversations in the style of long-term conversational memory benchmarks: two
  friends chatting over 15-30 sessions, small talk with facts about the speakers scattered through it (some
  later updated), and questions about those facts phrased as an agent would ask them, worded sometimes with
  the turn's words and sometimes with other forms, synonyms, the other speaker's name or a month. Distractor
  turns reuse the same entity words in unrelated small talk so that keyword overlap alone is not enough.
  Deterministic for a seed (``random.Random(seed)``).

Seed 0: chatterbot 21 memories, 988 turns, 751 queries, BM25 recall@10 0.42; dialogs 10 memories, ~4,600 turns,
~1,300 queries (60-80 facts a conversation, two questions each, caps it near 1,600), BM25 recall@10 0.47.

Nothing needs a database or the network at run time. The generator, its templates and word lists are written
for pgmem; nothing here is copied from another project (the names of books, films, bands and places are
ordinary public names).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

NAMES = ("chatterbot", "dialogs")


@dataclass(frozen=True)
class Turn:
    id: str
    role: str
    content: str


@dataclass(frozen=True)
class Query:
    memory: str
    query: str
    relevant: tuple[str, ...]


@dataclass(frozen=True)
class EvalSet:
    name: str
    source: str
    memories: dict[str, list[Turn]]
    queries: list[Query]


def build(name: str, *, seed: int = 0) -> EvalSet:
    """The evaluation set ``name`` (one of :data:`NAMES`); ``seed`` only changes the generated ``dialogs``."""
    if name == "chatterbot":
        return _chatterbot()
    if name == "dialogs":
        return _dialogs(seed)
    raise ValueError(f"unknown evaluation set {name!r}; expected one of {NAMES}")


def write_jsonl(evalset: EvalSet, path: str | Path) -> None:
    """The queries as JSON lines ``{"memory": ..., "query": ..., "relevant": [...]}``."""
    with Path(path).open("w", encoding="utf-8") as f:
        for q in evalset.queries:
            f.write(json.dumps({"memory": q.memory, "query": q.query, "relevant": list(q.relevant)}) + "\n")


def _merge(queries: list[tuple[str, str, list[str]]]) -> list[Query]:
    """One query per (memory, text), relevant ids united: a repeated question has every answer it was given."""
    merged: dict[tuple[str, str], list[str]] = {}
    for memory, text, ids in queries:
        acc = merged.setdefault((memory, text), [])
        acc.extend(i for i in ids if i not in acc)
    return [Query(m, t, tuple(ids)) for (m, t), ids in merged.items()]


# ---------------------------------------------------------------------------------------------- chatterbot


def _chatterbot() -> EvalSet:
    try:
        import chatterbot_corpus
        import yaml
    except ImportError as e:
        raise RuntimeError("the chatterbot set needs `pip install --no-deps chatterbot-corpus` and PyYAML") from e
    files = sorted((Path(chatterbot_corpus.__file__).parent / "data" / "english").glob("*.yml"))
    memories: dict[str, list[Turn]] = {}
    queries: list[tuple[str, str, list[str]]] = []
    for file in files:
        memory = file.stem
        turns: list[Turn] = []
        by_text: dict[str, str] = {}  # reply text -> kept turn id (the corpus repeats replies verbatim)
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        for conv in data.get("conversations") or []:
            # YAML turns a bare "yes" into True and "" into None: such conversations are not dialogue
            if not isinstance(conv, list) or len(conv) < 2:
                continue
            question, reply = conv[0], conv[1]
            if not (isinstance(question, str) and isinstance(reply, str) and question.strip() and reply.strip()):
                continue
            ids = []
            for text in conv[1::2]:
                if not isinstance(text, str) or not text.strip():
                    continue
                text = text.strip()
                if text not in by_text:
                    by_text[text] = f"chatterbot:{memory}:{len(turns)}"
                    turns.append(Turn(by_text[text], "assistant", text))
                ids.append(by_text[text])
            queries.append((memory, question.strip(), ids[:1]))
        if turns:
            memories[memory] = turns
    source = "PyPI chatterbot-corpus (github.com/gunthercox/chatterbot-corpus), data/english/*.yml; BSD-3-Clause"
    return EvalSet("chatterbot", source, memories, _merge(queries))


# ------------------------------------------------------------------------------------------------- dialogs
# The word lists and templates are text blocks (one list a line, "|" between entries, "/" between the fields of
# one entry, an indented line continues the list above) so that they stay compact under a formatter.

_WORDS = """
people: Maria/f|Tom/m|Aisha/f|Diego/m|Priya/f|Lukas/m|Chloe/f|Kenji/m|Sofia/f|Omar/m|Hannah/f|Mateo/m|Leila/f|Ben/m
  Yuki/f|Samuel/m|Ines/f|Kofi/m|Nora/f|Ravi/m|Elena/f|Jonas/m|Amara/f|Felix/m|Grace/f|Tariq/m|Lina/f|Oscar/m
city: Porto|Berlin|Lisbon|Vienna|Toronto|Seattle|Melbourne|Dublin|Edinburgh|Kyoto|Barcelona|Copenhagen|Montreal
  Austin|Prague|Krakow|Valencia|Denver|Wellington|Ghent|Bologna|Tallinn|Nairobi|Oslo|Lyon|Utrecht|Boston|Seville
place: the Scottish Highlands|Iceland|the Dolomites|Crete|Patagonia|Morocco|Vietnam|the Azores|Sardinia|Tuscany
  Bali|Costa Rica|Peru|Japan|Mexico City|Norway|Slovenia|Cornwall|Sicily|Jordan|Croatia|Quebec|Kerala
company: Northwind Labs|Bluepeak Energy|Harbor Health|Quillsoft|Tidewater Bank|Greenleaf Foods|Orbital Games
  Brightpath Schools|Kestrel Logistics|Lumen Analytics|Ironbridge Studio|Solace Insurance|Fernway Travel
  Pinecone Robotics|Copperleaf Media|Riverside Hospital|Atlas Freight|Nimbus Cloud
role: data analyst|product designer|nurse|project manager|software engineer|sous chef|marketing lead|accountant
  physiotherapist|teacher|UX researcher|sales manager|architect|lab technician|copywriter|operations coordinator
species: dog/puppy|cat/kitten|rabbit/bunny|parrot/bird|guinea pig/furball|tortoise/shelled buddy|ferret/fuzzball
pet: Biscuit|Pepper|Mochi|Luna|Ziggy|Noodle|Clementine|Waffles|Juniper|Otis|Pickles|Hazel|Bruno|Miso|Olive
hobby: pottery/a pottery class/throwing pots on the wheel|rock climbing/a bouldering gym/scrambling up walls
  watercolor painting/an art course/painting landscapes|salsa dancing/salsa lessons/dancing twice a week
  birdwatching/a birding group/spotting warblers|knitting/a knitting circle/making scarves
  chess/an online chess club/studying openings|sourdough baking/a bread workshop/feeding my starter
  photography/a photo walk group/shooting street portraits|surfing/surf lessons/catching waves at dawn
  woodworking/a carpentry course/building a bookshelf|archery/an archery range/shooting arrows
  calligraphy/a lettering workshop/practising brush strokes|fencing/a fencing club/sword drills
car: Toyota Corolla|Honda Civic|Volkswagen Golf|Mazda 3|Skoda Octavia|Ford Fiesta|Tesla Model 3|Subaru Outback
  Fiat Panda|Volvo V60|Kia Niro|Renault Clio
instrument: cello|ukulele|electric guitar|digital piano|violin|saxophone|drum kit|banjo|trumpet|accordion|flute
gadget: telescope|espresso machine|kayak|road bike|3D printer|drone|sewing machine|film camera|e-reader
purpose: hiking trip/trek|beach holiday/seaside vacation|work conference/business trip|ski trip/winter getaway
  road trip/long drive|food tour/culinary getaway|family reunion/visit with relatives|yoga retreat/wellness break
  camping trip/nights in a tent|friend's wedding/marriage ceremony of a friend
rel: sister|brother|mom|dad|cousin|grandmother|grandfather|aunt|uncle
sib: sister|brother|cousin
parent: mom|dad|aunt|uncle
elder: grandmother|grandfather|great-aunt|great-uncle
book: Pride and Prejudice/Jane Austen|Dune/Frank Herbert|The Hobbit/Tolkien|Beloved/Toni Morrison
  Middlemarch/George Eliot|Never Let Me Go/Kazuo Ishiguro|Rebecca/Daphne du Maurier|Things Fall Apart/Chinua Achebe
  The Name of the Rose/Umberto Eco|Jane Eyre/Charlotte Bronte|Anna Karenina/Tolstoy|Frankenstein/Mary Shelley
dish: mushroom risotto|pad thai|shakshuka|lasagna|ramen|paella|pierogi|fish tacos|butter chicken|moussaka|pho
film: Spirited Away|The Godfather|Paddington 2|Arrival|Casablanca|Jurassic Park|Alien|Back to the Future|Heat
band: Fleetwood Mac|Radiohead|ABBA|Daft Punk|Queen|Nina Simone|Arctic Monkeys|Beyonce|Bob Marley|Bjork
lang: Japanese|Portuguese|Korean|Italian|Arabic|Dutch|Greek|Swahili|Mandarin|Polish|Turkish|Finnish
vol: food bank|public library|community garden|animal rescue|hospice|soup kitchen|refugee centre
goal: a trip to Japan|a deposit on a flat|a new laptop|my wedding|a sailing course|a camper van|a piano
allergen: peanuts|shellfish|pollen|penicillin|strawberries|sesame|kiwi|dust mites
mountain: Ben Nevis|Mount Olympus|Snowdon|Triglav|Mount Fuji|Pico|Etna|Zugspitze
tattoo: swallow|compass|wave|moon|fern leaf|paper plane|lighthouse
partner: Alex|Sam|Jordan|Robin|Charlie|Jamie|Nico|Dani|Kai|Ari
baby: Mila|Leo|Ada|Theo|Iris|Hugo|Rosa|Eli|Nina|Max|Aurora|Felipe
month: January|February|March|April|May|June|July|August|September|October|November|December
day: Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday
callback: pet/How's your new pet settling in?|move/Are you enjoying the new city?|trip/Recovered from the trip yet?
  job/How's the new job treating you?|hobby/Still doing your new hobby?|lang/How's the language learning going?
  goal/How's the saving going?|partner/How are things with your new partner?|car/Happy with the car?
  fam/How's your {rel} doing?|h/How are you feeling, health-wise?
react: Congrats!|No way, that's amazing!|Wow, tell me more!|Oh, that's huge news.|I did not see that coming!
  That's so exciting!|Oh wow. How do you feel about it?|Haha, of course you did.|Love that for you.
react_sad: Oh no, I'm so sorry.|Ugh, that sounds awful.|Take it easy, okay?|Sending you a big hug.
react_q: Tell me everything.|When did all this happen?|Do you have pictures?|How did the family take it?
  Did you see it coming?|We need to celebrate soon.|How are you holding up?
callback_r: Really well, thanks for asking!|Still getting used to it, but good.|Better than expected honestly.
  Ups and downs, but I'm happy.|Ask me again next week, haha.|Honestly? Great.
prefix: Oh, I forgot to tell you:|Big news!|Anyway, quick update:|Guess what.|News from my side:|Okay so.
tail: Anyway, how are you?|Still can't believe it.|It's been a lot.|Will send photos.|What a week.
extra: Long week though.
  I'll tell you everything when we meet.|Coffee soon?|My phone is about to die, sorry.|Sorry for the wall of text.
  The neighbours are having a party again, so it's loud here.|Also I finally fixed my bike.|How's your family?
open: Hey {O}!|Hi, how are you?|Morning!|Hey you!|{O}! It's been a while.|Hello hello!|Hi there!|Evening!
open_t: How have you been?|Long time no talk.|Sorry I've been quiet.|Hope your week is going well.
  I was just thinking about you.|Got a minute to chat?
open_r: Hi {O}!|Hey!|Oh hi!|Heyyy!|Good to hear from you!|Hiya!|Hello!
answer: Pretty good, thanks.|Not bad, can't complain.|Busy but fine.|A bit tired, honestly.|Really good actually.
  Up and down.|Surviving, haha.
close: Gotta run, talk soon!|Okay, dinner's ready, bye!|Talk later!|I'll let you go. Take care!
  Let's catch up again next week.|Need to sleep, good night!
close_r: Bye!|Take care!|Talk soon!|Night!|Sounds good, see you!|Bye bye, have a good one.
weather: It's pouring rain|The sun is finally out|It's freezing|It's so windy|It's foggy|It's muggy and hot
  We got a bit of snow|It's grey and drizzly
weather_t: so I'm staying in with tea|perfect for a long walk|and my umbrella gave up|and the trains are late again
  so I opened all the windows|and I forgot my jacket, of course|so the park was packed
work: Work has been {adj} this week|My team is {adj} right now|The office was {adj} today|Today was {adj}
adj: hectic|slow|chaotic|surprisingly calm|exhausting|weird|fine|all meetings|quiet
work_t: three deadlines at once|my manager moved every meeting|the wifi died during a call
  we had a fire drill at noon|someone microwaved fish again|I spent all day on spreadsheets|a client called twice
feel: I'm feeling {feels} today|Honestly I feel {feels}|Kind of {feels} lately|Woke up {feels}
feels: tired|pretty upbeat|a bit low|restless|grateful|stressed|calm|nostalgic|unmotivated|energised
feel_t: not sure why|probably the weather|too much coffee maybe|I think I need a holiday|slept badly
  had a really good walk this morning|finished a big task
plan: This weekend I want to {plans}|Tomorrow I'll probably {plans}|Tonight I'm going to {plans}
plans: clean the whole flat|check out the farmers market|sleep in for once|binge that new series
  meet some old friends|fix the squeaky door|try a new recipe|go for a long walk|do absolutely nothing
  sort out my taxes|call my grandparents|repaint the bathroom
askback: What about you?|How's your week going?|Any plans yourself?|How are things with you?|You?
  Anything new on your side?
reply: Haha, I know that feeling.|That sounds lovely.|Oh no, that's rough.|Good for you!|Same here, honestly.
  I hope it gets better soon.|Ha, classic.|That's so relatable.|Sounds like a plan.|Oh nice, enjoy it!
  Ugh, I feel you.|Fingers crossed for you.|Wait, really?|Lol.
distract: My neighbour's {species} was going wild all night, I barely slept.
  There was the cutest {young} at the park today, I almost took it home.
  A colleague just came back from {city} and says it's overrated.|I read that rents in {city} went up again.
  I watched a documentary about {place} last night, looks gorgeous.|My {rel} says {place} is the best holiday ever.
  My friend interviewed at {company} but they never called back.|I keep seeing ads for jobs at {company}.
  Someone at the gym talked about {hobby} for a whole hour.|Saw a {car} parked outside and thought of you.
  My {rel} keeps sending me recipes for {dish}.|The new place on the corner does {dish}, we should go.
  The bookshop had {book} in the window, I still haven't read it.|They're playing {band} in the cafe right now.
  My {rel} wants to visit {city} next year, any tips?|Someone in my building is learning the {instrument}.
  My cousin is moving to {city} for work, can you believe it?|My friend's company is looking for a {role}.
  A {species} ran across the road in front of my bike today!|My coworker just adopted a {species}, so cute.
  Found an old photo of my {rel} from the nineties, the hair!|Thinking of trying {lang} lessons someday.
  We watched {film} again last night, still holds up.|I can't believe it's almost {month} already.
  My rent contract ends in {month}, so I need to decide soon.|A guy on the train had a {gadget} in a huge box.
  My boss wants the whole team to try {hobby} as a team building thing.
"""

# Fact kinds: "kind = " and the ways of saying it ("|" between them; " // " spreads one over two consecutive turns
# of its speaker), then "?" lines of questions, each led by its style: "lex" reuses the turn's key words, "sem"
# other forms or synonyms, "name" brings in the other speaker, "month" the month the turn names (asked only when
# it names one). A kind ending in "_first" holds an original fact's questions once a later turn has updated it.
_KINDS = """
pet = We adopted a {species} last week, {pp} name is {pet}.
  Meet {pet}, the {species} we adopted! First night was chaos.
  Guess what, we adopted a {young} from the shelter, the name is {pet}!
  We adopted a {young} from the animal shelter on Sunday. // The kids picked the name: {pet}.
  ? lex What is the name of the {species} {P} adopted? | lex What name did {P}'s new {species} get?
  ? sem Which pet did {P} bring home? | sem What animal lives with {P} now? | name What pet did {P} tell {O} about?
move = We finally moved to {city}! Still surrounded by boxes.
  The movers came on Monday, we officially moved to {city}.
  I signed the lease for a flat in {city}, we moved in yesterday.
  Big change on my side: we moved out of the old place. // The new flat is in {city}, the neighbourhood is lovely.
  ? lex Which city did {P} move to? | lex Where is the flat {P} moved to? | sem Where did {P} relocate?
  ? sem Where has {P} settled down? | name Where did {P} tell {O} {pr} lives now?
move_first
  ? lex Which city did {P} move to first? | lex Where was the first flat {P} moved to?
  ? sem Where did {P} relocate to at first? | sem Where did {P} live before {city2}?
move2 = We moved again, now we're in {city2}. {city} just wasn't working out.
  Plot twist: we moved again and left {city}, we live in {city2} now. | New address again! We moved to {city2}.
  ? lex Where did {P} move to again? | lex Where does {P} live now after moving again?
  ? sem What is {P}'s current home city? | sem Where did {P} go after leaving {city}?
  ? name Where did {P} tell {O} the family ended up?
job = I started a new job at {company} as a {role}. | Got the job offer from {company}! I'll be their new {role}.
  First week at the new job as a {role} at {company} is done, my head is spinning.
  So I'm officially starting at {company} now, a {role} job. // The team seems really nice.
  ? lex Where did {P} start a new job? | lex What job did {P} start at {company}? | sem Who is {P}'s employer?
  ? sem What does {P} do for a living? | name What career news did {P} share with {O}?
job_first
  ? lex Where did {P} start a new job? | lex What job did {P} start at {company}? | sem Who is {P}'s employer?
job2 = I got promoted to {role2}! My boss told me this morning. | Good news: I got promoted, I'm {role2} now!
  They promoted me to {role2} at work, more money and way more meetings.
  ? lex What was {P} promoted to? | lex What promotion did {P} get at work? | sem What is {P}'s job title now?
  ? sem Did {P} move up at {company}?
hobby = I took up {hobby} as a hobby and I'm kind of obsessed. | My new hobby is {activity}, I joined {course}.
  New hobby alert: I joined {course}, so now my weekends are all about {activity}.
  I needed a hobby besides work, so I signed up for {course}. // Honestly {activity} clears my head.
  ? lex What new hobby did {P} take up? | lex Which hobby is {P} into these days?
  ? sem What pastime does {P} enjoy lately? | sem How does {P} spend free weekends these days?
  ? name What activity did {P} get {O} interested in?
hobby_first
  ? lex What hobby did {P} have before {hobby2}? | sem Which pastime did {P} try first?
hobby2 = I quit {hobby}, too much drama. My new hobby is {hobby2}.
  Gave up on {hobby}, I do {hobby2} now and love it. | Confession: {hobby} is over for me. I switched to {hobby2}.
  ? lex What is {P} into now instead of {hobby}? | lex What did {P} switch to after quitting {hobby}?
  ? sem What pastime does {P} currently enjoy?
car = I finally bought a car, a used {car}! | Picked up the car I bought today, a {car}, it smells so new.
  We bought a car to replace the old van, a {car}. // Parking it is a whole new skill though.
  ? lex What car did {P} buy? | lex Which car did {P} finally buy? | sem What does {P} drive now?
  ? sem Which vehicle did {P} get?
instrument = I bought a {instrument} and started lessons.
  There's a {instrument} in my living room, I'm learning to play it.
  Treated myself to a second-hand {instrument}, taking lessons every week.
  ? lex What instrument is {P} taking lessons on? | lex What did {P} buy to start music lessons?
  ? sem What is {P} practising these days? | name What instrument did {P} mention to {O}?
gadget = Treated myself to a {gadget} this week. | I caved and treated myself to a {gadget}, no regrets.
  The {gadget} I treated myself to arrived today!
  ? lex What did {P} treat {pobj}self to? | sem What big purchase did {P} make recently?
trip = Just got back from a {purpose} in {place}, totally worth it. | {when} we flew to {place} for a {purpose}.
  {place} was amazing. The {purpose} {when} was exactly what I needed.
  Sorry I went quiet, I was away on a {purpose} for ten days. // It was in {place}, barely had signal.
  ? lex Where did {P} go for the {purpose}? | sem Where was {P}'s {purpose2}?
  ? month Where did {P} travel in {month}?
fam_married = My {rel} got married {when}! Best party in years.
  Family news: my {rel} finally got married, what a wedding.
  ? lex Who in {P}'s family got married? | lex When did {P}'s {rel} get married?
  ? sem Which relative of {P} tied the knot?
fam_baby = My {sib} had a baby, little {baby} arrived on Tuesday!
  Welcome to the world, {baby}! My {sib} had a baby.
  ? lex What is the name of the baby {P}'s {sib} had? | sem Who is the newborn in {P}'s family?
fam_grad = My {sib} graduated in marine biology {when}, so proud.
  Went to my {sib}'s graduation, marine biology done!
  ? lex When was {P}'s {sib}'s graduation? | sem What did {P}'s {sib} study at university?
fam_retired = My {parent} retired after thirty years as a train driver.
  It's official, my {parent} is retired! No more trains.
  ? lex Who retired in {P}'s family? | lex What was {P}'s {parent}'s job before being retired?
  ? sem What was the career of {P}'s {parent}?
fam_birthday = We threw a huge party for my {elder}'s 90th birthday. | My {elder} turned 90, what a birthday party.
  ? lex How old did {P}'s {elder} turn at the birthday party? | sem Which family milestone did {P} celebrate?
fam_engaged = My {rel} got engaged in {place}, the proposal was on a boat. | Huge news: my {rel} is engaged!
  ? lex Who in {P}'s family got engaged? | sem Which relative of {P} is planning a wedding?
h_break = I broke my wrist falling off my bike, cast for six weeks. | Fell on the ice and broke my wrist.
  ? lex What did {P} break when {pr} fell? | sem What injury did {P} have?
h_allergy = Turns out I'm allergic to {allergen}, the doctor confirmed it.
  Had an allergic reaction to {allergen} again.
  ? lex What is {P} allergic to? | sem What does {P} have to avoid for health reasons?
h_surgery = The surgery on my knee went fine, I'm on crutches for a while. | Knee surgery done, physio next.
  ? lex What surgery did {P} have? | sem What medical procedure did {P} go through?
h_migraine = I've been getting migraines almost every week. | Migraines again, third one this month.
  ? lex How often does {P} get migraines? | sem What health problem keeps bothering {P}?
h_glasses = The optician says I need glasses now, so I picked round frames. | I wear reading glasses now.
  ? lex Why did {P} get glasses? | sem What changed with {P}'s eyesight?
fav_book = I just reread {book} by {author}, still my favourite book. | My favourite book ever is {book}.
  {author} is my comfort author, {book} is my favourite book.
  ? lex What is {P}'s favourite book? | sem Which novel does {P} love the most?
fav_dish = Nothing beats {dish}, I could eat it every day. | I could eat {dish} every day, ultimate comfort food.
  ? lex What food could {P} eat every day? | sem What is {P}'s favourite meal?
fav_film = I've watched {film} like twenty times, it's my favourite film. | {film} is my all-time favourite film.
  ? lex What is {P}'s all-time favourite film? | sem Which movie does {P} rewatch constantly?
fav_band = {band} is on repeat, I know every song by heart.
  {band} songs are all I listen to, I know them by heart.
  ? lex Which artist's songs does {P} know by heart? | sem What music does {P} like best?
d_marathon = {when} I ran my first half marathon in {city}, just under two hours!
  Ran my first half marathon in {city} {when}. My legs are still complaining.
  ? lex Where did {P} run {ps} first half marathon? | sem What race did {P} complete?
  ? month What did {P} do in {month}?
d_license = I passed my driving test {when}! First try. | {when} I finally passed my driving test.
  ? lex When did {P} pass the driving test? | sem When did {P} become allowed to drive?
  ? month What did {P} do in {month}?
d_talk = I gave a talk at a conference in {city} {when}, my hands were shaking.
  {when} I gave a talk to three hundred people in {city}.
  ? lex Where did {P} give a talk? | sem Where did {P} speak in public? | month What did {P} do in {month}?
d_ride = {when} I did a 100 km charity bike ride for the children's hospital. | Did a 100 km charity ride {when}.
  ? lex How long was {P}'s charity bike ride? | sem What fundraiser did {P} take part in?
  ? month What did {P} do in {month}?
d_tattoo = Got my first tattoo {when}, a tiny {tattoo} on my wrist.
  {when} I got my first tattoo! A small {tattoo}.
  ? lex What tattoo did {P} get? | sem What design does {P} have on {ps} skin? | month What did {P} do in {month}?
d_climb = We climbed {mountain} {when}, the view from the top was unreal.
  {when} I climbed all the way up {mountain}.
  ? lex When did {P} climb {mountain}? | sem Which summit did {P} reach? | month What did {P} do in {month}?
d_cake = I baked a three-tier wedding cake for a friend {when}. | {when} I baked my friend's wedding cake!
  ? lex What did {P} bake for the wedding? | sem What did {P} make for a friend's big day?
  ? month What did {P} do in {month}?
d_concert = {when} I saw {band} live in {city}, best concert of my life. | Went to the {band} concert {when}!
  ? lex Which concert did {P} go to? | sem Which artist did {P} see perform? | month What did {P} do in {month}?
lang = I've been learning {lang} with an app every morning. | Started learning {lang} in classes on Tuesdays!
  ? lex What language is {P} learning? | sem Which foreign tongue is {P} studying?
  ? name What did {P} tell {O} about {ps} classes?
volunteer = I started volunteering at the {vol} on Sundays. | Spent the morning volunteering at the {vol} again.
  ? lex Where has {P} been volunteering? | sem How does {P} help out in the community?
goal = I'm saving up for {goal}, no more takeaway for me. | Saving every spare euro for {goal} now.
  ? lex What is {P} saving for? | sem What is {P} putting money aside for?
  ? name What money goal did {P} mention to {O}?
partner = I've been seeing someone! {partner}, we met at a friend's barbecue.
  So... I'm seeing {partner} now, it's official.
  ? lex Who is {P} seeing? | sem What is the name of {P}'s new partner? | name Who did {P} tell {O} about dating?
"""


def _parse_words(text: str) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for line in text.strip().splitlines():
        if not line.startswith(" "):
            key, _, line = line.partition(": ")
        lines.setdefault(key, []).append(line.strip())
    return {k: [e.strip() for e in "|".join(v).split("|")] for k, v in lines.items()}


def _parse_kinds(text: str) -> dict[str, tuple[list[str], list[tuple[str, str]]]]:
    kinds: dict[str, tuple[list[str], list[tuple[str, str]]]] = {}
    for line in text.strip().splitlines():
        if not line.startswith(" "):
            kind, _, line = line.partition(" = ")
            says, asks = kinds.setdefault(kind, ([], []))
        if line.strip().startswith("? "):
            asks.extend((st, q) for st, _, q in (x.strip().partition(" ") for x in line.strip()[2:].split(" | ")))
        elif line.strip():
            says.extend(x.strip() for x in line.split(" | "))
    return kinds


W = _parse_words(_WORDS)
KINDS = _parse_kinds(_KINDS)
UPDATES = {"move": "move2", "job": "job2", "hobby": "hobby2"}
# How often each style of question is asked: tuned so that BM25 neither solves nor misses everything.
STYLE_WEIGHTS = {"lex": 0.5, "sem": 0.3, "name": 0.15, "month": 0.6}
# A later question about a stated fact: the topic's words again, never its answer.
CALLBACK = dict(e.split("/") for e in W["callback"])
# The fields of one entry ("dog/puppy") are drawn together.
LINKED = {f: fs for fs in (("species", "young"), ("hobby", "course", "activity"), ("book", "author")) for f in fs}
LINKED |= {"purpose": ("purpose", "purpose2")}
RELATIVES = ("rel", "sib", "parent", "elder")
# Asked of dated events; the speaker's trips that month answer it too.
DID_IN = "What did {P} do in {month}?"


@dataclass
class _Person:
    name: str
    pos: str  # his / her
    sub: str  # he / she
    obj: str  # him / her


class _Slots(dict[str, str]):
    """Template slots drawn on first use, each value new to the conversation (so every question has one answer)."""

    def __init__(self, r: random.Random, used: dict[str, list[str]], base: dict[str, str], scope: str) -> None:
        super().__init__(base)
        self.r, self.used, self.scope = r, used, scope

    def __missing__(self, key: str) -> str:
        if key in LINKED:
            fields = LINKED[key]
            entry = self._fresh(fields[0], W[fields[0]])
            self.update(zip(fields, entry.split("/"), strict=True))
        elif key == "hobby2":
            self[key] = self._fresh("hobby", W["hobby"]).split("/")[0]
        elif key == "role2":
            self[key] = self.r.choice(["senior {}", "lead {}", "head {}"]).format(self["role"])
        elif key in RELATIVES:  # relatives are per speaker: each of them has one sister
            self[key] = self._fresh("rel:" + self.scope, W[key])
        elif key in ("pp", "obj"):
            pp = self.r.choice(["his", "her"])
            self.update(pp=pp, obj="him" if pp == "his" else "her")
        else:
            pool = "city" if key == "city2" else key
            self[key] = self._fresh(pool, W[pool])
        return self[key]

    def _fresh(self, pool: str, values: list[str]) -> str:
        taken = self.used.setdefault(pool, [])
        value = self.r.choice([v for v in values if v not in taken] or values)
        taken.append(value)
        return value


@dataclass
class _Fact:
    owner: int
    kind: str
    slots: _Slots
    ids: list[str] = field(default_factory=list)
    updated: bool = False
    month: str | None = None


def _when(r: random.Random, day: dt.date) -> tuple[str, dt.date]:
    """A time phrase for an event a few days before ``day``, and the event's date."""
    back = r.randint(1, 9)
    event = day - dt.timedelta(days=back)
    n, month = event.day, W["month"][event.month - 1]
    nth = f"{n}{'th' if 10 <= n % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
    part = "early" if n < 11 else "mid" if n < 21 else "late"
    phrases = [f"{back} days ago", "last weekend", f"last {W['day'][event.weekday()]}", "yesterday"]
    phrase = r.choice([*phrases, f"on {month} {nth}", f"on the {nth} of {month}", f"in {part} {month}"])
    return phrase, (day - dt.timedelta(days=1) if phrase == "yesterday" else event)


def _conversation(r: random.Random, ci: int) -> tuple[list[Turn], list[tuple[str, str, list[str]]]]:
    people = [
        _Person(n, *(("his", "he", "him") if g == "m" else ("her", "she", "her")))
        for n, g in (p.split("/") for p in r.sample(W["people"], 2))
    ]
    used: dict[str, list[str]] = {}
    memory = f"conv-{ci}"

    # Facts: each kind once per speaker (trips, family news, health, dated events: a few each), some left out.
    chains: list[list[_Fact]] = []
    for owner, (p, o) in enumerate((people, people[::-1])):
        base = {"P": p.name, "O": o.name, "ps": p.pos, "pr": p.sub, "pobj": p.obj, "when": "{when}"}
        single = [k for k in KINDS if k.startswith("fav_") or "_" not in k and k not in UPDATES.values()]
        group = {g: [k for k in KINDS if k.startswith(g)] for g in ("fam_", "h_", "d_")}
        kinds = single + ["trip"] * r.randint(2, 4) + r.sample(group["fam_"], r.randint(3, 5))
        kinds += r.sample(group["h_"], r.randint(2, 4)) + r.sample(group["d_"], r.randint(4, 7))
        for kind in kinds:
            chain = [_Fact(owner, kind, _Slots(r, used, base, p.name))]
            if kind in UPDATES and r.random() < 0.5:
                chain[0].updated = True
                chain.append(_Fact(owner, UPDATES[kind], chain[0].slots))
            chains.append(chain)
    r.shuffle(chains)
    n_facts, picked = r.randint(64, 80), []
    for chain in chains:
        if sum(map(len, picked)) + len(chain) <= n_facts:
            picked.append(chain)
    # Originals of updated facts early, their updates a good while later.
    order = [c[0] for c in picked]
    for chain in (c for c in picked if len(c) == 2):
        i = order.index(chain[0])
        if i > len(order) * 0.5:
            j = r.randrange(int(len(order) * 0.4))
            order[i], order[j] = order[j], order[i]
            i = j
        order.insert(r.randint(i + max(8, len(order) // 4), len(order)), chain[1])

    # About two turns a fact (its turn, a reaction), five a session (greetings, farewells, a callback); the rest
    # small talk in pairs, spread unevenly over the sessions.
    n_sessions, n_turns = r.randint(15, 30), r.randint(320, 580)
    weights = [r.uniform(0.5, 1.5) for _ in range(n_sessions)]
    pairs = max(n_sessions, (n_turns - 2 * len(order) - 5 * n_sessions) // 2)
    bounds = sorted(r.sample(range(1, len(order)), n_sessions - 1))
    sessions = [order[i:j] for i, j in zip([0, *bounds], [*bounds, len(order)], strict=True)]
    day = dt.date(2023, 1, 1) + dt.timedelta(days=r.randint(0, 200))
    turns: list[Turn] = []
    stated: list[_Fact] = []

    def say(who: int, text: str) -> str:
        tid = f"dialogs:{ci}:{len(turns)}"
        text = re.sub(r"\b([Aa]) (?=[AEIOaeio])", r"\1n ", text.replace("{O}", people[1 - who].name))
        turns.append(Turn(tid, people[who].name, _cap(text)))
        return tid

    def pick(key: str) -> str:
        return r.choice(W[key])

    def entity(key: str) -> str:
        # Mostly the conversation's own values: the distractor shares words with a real fact.
        pool = "species" if key == "young" else "city" if key == "city2" else key
        values = used.get(pool) if r.random() < 0.6 else None
        entry = r.choice(values or W[pool])
        return entry.split("/")[LINKED[key].index(key)] if key in LINKED else entry

    def sentence(distract: float) -> str:
        x = r.random()
        if x < distract:
            tpl = pick("distract")
            return tpl.format(**{k: entity(k) for k in re.findall(r"{(\w+)}", tpl)})
        if x < distract + (1 - distract) / 4:
            return f"{pick('weather')}, {pick('weather_t')}."
        if x < distract + (1 - distract) / 2:
            return f"{pick('work').format(adj=pick('adj'))}: {pick('work_t')}."
        if x < distract + (1 - distract) * 3 / 4:
            return f"{pick('feel').format(feels=pick('feels'))}, {pick('feel_t')}."
        return pick("plan").format(plans=pick("plans")) + "."

    def small_talk(who: int) -> None:
        text = sentence(0.35) + (" " + r.choice([sentence(0.1), pick("extra")]) if r.random() < 0.5 else "")
        say(who, text + (" " + pick("askback") if r.random() < 0.35 else ""))
        say(1 - who, pick("reply") + (" " + sentence(0.2) if r.random() < 0.6 else ""))

    for facts, weight in zip(sessions, weights, strict=True):
        day += dt.timedelta(days=r.randint(5, max(6, 300 // n_sessions)))  # < 11 months: a month name is unique
        blocks: list[_Fact | str | tuple[str, _Fact]] = [*facts, *["talk"] * round(pairs * weight / sum(weights))]
        if stated and r.random() < 0.7:
            blocks.append(("callback", r.choice(stated)))
        r.shuffle(blocks)
        who = r.randrange(2)
        say(who, f"{pick('open')} {pick('open_t')}")
        say(1 - who, f"{pick('open_r')} {pick('answer')} {pick('askback')}")
        for block in blocks:
            if isinstance(block, str):
                small_talk(r.randrange(2))
            elif isinstance(block, tuple):
                fact = block[1]
                key = fact.kind.split("_")[0] if fact.kind[:2] in ("fa", "h_") else fact.kind
                if key in CALLBACK:
                    rel = next((fact.slots[k] for k in RELATIVES if k in fact.slots), "family")
                    say(1 - fact.owner, CALLBACK[key].format(rel=rel))
                    say(fact.owner, pick("callback_r") + (" " + sentence(0.1) if r.random() < 0.5 else ""))
            else:
                fact = block
                text = r.choice(KINDS[fact.kind][0]).format_map(fact.slots)
                if "{when}" in text:
                    phrase, event = _when(r, day)
                    text = text.replace("{when}", phrase)
                    month = W["month"][event.month - 1]
                    fact.month = month if month in phrase else None
                parts = text.split(" // ")
                if r.random() < 0.4 and not re.match(r"[^.!?]{0,25}[:!]", parts[0]):  # not "Big news! Big news!"
                    parts[0] = f"{pick('prefix')} {_cap(parts[0])}"
                if r.random() < 0.5:
                    parts[-1] += " " + r.choice([sentence(0.0), pick("tail"), pick("extra")])
                fact.ids = [say(fact.owner, part) for part in parts]
                if r.random() < 0.8:
                    react = pick("react_sad" if fact.kind.startswith("h_") else "react")
                    say(1 - fact.owner, react + (" " + pick("react_q") if r.random() < 0.4 else ""))
                stated.append(fact)
        say(who, pick("close"))
        say(1 - who, pick("close_r"))

    # Questions: one or two per fact, in the styles' proportions.
    queries: list[tuple[str, str, list[str]]] = []
    for fact in stated:
        asks = KINDS[fact.kind + "_first"][1] if fact.updated else KINDS[fact.kind][1]
        asks = [(st, q) for st, q in asks if st != "month" or fact.month]
        chosen: list[tuple[str, str]] = []
        for _ in range(1 if r.random() < 0.05 else 2):
            left = [a for a in asks if a not in chosen]
            if left:
                chosen.append(r.choices(left, [STYLE_WEIGHTS[st] for st, _ in left])[0])
        for style, q in chosen:
            ids = fact.ids
            if style == "month":  # every event of this speaker that month answers it (trips what they "did")
                same = [f for f in stated if (f.owner, f.month) == (fact.owner, fact.month)]
                same = [f for f in same if (style, q) in KINDS[f.kind][1] or (q == DID_IN and f.kind == "trip")]
                ids = [i for f in same for i in f.ids]
            queries.append((memory, q.replace("{month}", fact.month or "").format_map(fact.slots), ids))
    return turns, queries


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _dialogs(seed: int) -> EvalSet:
    r = random.Random(seed)
    memories: dict[str, list[Turn]] = {}
    queries: list[tuple[str, str, list[str]]] = []
    for ci in range(10):
        turns, qs = _conversation(r, ci)
        memories[f"conv-{ci}"] = turns
        queries += qs
    source = f"generated by benchmarks/evalsets.py (seed {seed}) from pgmem's own templates and word lists; MIT"
    return EvalSet("dialogs", source, memories, _merge(queries))


# --------------------------------------------------------------------------------------------------- stats


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def bm25_recall(evalset: EvalSet, k: int = 10) -> float:
    """Mean recall@k of BM25Okapi (rank_bm25, no stemming), each query ranked over its own memory's turns."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError as e:
        raise RuntimeError("the BM25 baseline needs `pip install rank_bm25`") from e
    indexes = {m: (BM25Okapi([_tokens(t.content) for t in turns]), turns) for m, turns in evalset.memories.items()}
    recalls = []
    for q in evalset.queries:
        bm25, turns = indexes[q.memory]
        scores = bm25.get_scores(_tokens(q.query))
        top = {turns[i].id for i in sorted(range(len(turns)), key=lambda i: -scores[i])[:k]}
        recalls.append(len(top & set(q.relevant)) / len(q.relevant))
    return statistics.fmean(recalls)


def stats(evalset: EvalSet) -> dict[str, float]:
    turns = [t for ts in evalset.memories.values() for t in ts]
    return {
        "memories": len(evalset.memories),
        "turns": len(turns),
        "queries": len(evalset.queries),
        "relevant_per_query": statistics.fmean(len(q.relevant) for q in evalset.queries),
        "words_per_turn": statistics.fmean(len(t.content.split()) for t in turns),
        "bm25_recall@10": bm25_recall(evalset),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stats", action="store_true", help="print sizes and a BM25 recall@10 baseline per set")
    parser.add_argument("--out", type=Path, help="write DIR/<name>.jsonl for every set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", choices=NAMES, action="append", help="only this set (repeatable)")
    args = parser.parse_args(argv)
    for name in args.set or NAMES:
        evalset = build(name, seed=args.seed)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            write_jsonl(evalset, args.out / f"{name}.jsonl")
        if args.stats or not args.out:
            print(
                f"{name}: "
                + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in stats(evalset).items())
            )
            print(f"  source: {evalset.source}")


if __name__ == "__main__":
    main()
