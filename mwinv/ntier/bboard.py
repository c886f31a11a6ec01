"""A RUBBoS-like bulletin board: users, stories and their comments, with the skew of a real one (a few
stories draw most comments and most reads, a few users write most), and its read-only browse mix as
pgbench custom scripts with weights, think time (\\sleep) and one rare heavy page: a prefix search over
the comments' subjects with OFFSET, which no index serves (a full scan and a sort each time).

Page weights follow RUBBoS's browse-only mix in spirit: reading a story with its comments dominates,
then the front page and categories; the search is 1 in 100 pages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mwinv import privfile
from mwinv.errors import MwinvError

DATABASE = "bboard"
CATEGORIES = 20


@dataclass(frozen=True)
class Size:
    users: int = 2_000
    stories: int = 5_000
    comments: int = 100_000

    def __post_init__(self) -> None:
        if min(self.users, self.stories, self.comments) < 1:
            raise MwinvError(f"bulletin board size {self}: at least 1 of each")


# comments' story: power(random(), 4) puts 1 - 0.5^(1/4) = 16% of comments on the first 0.1% of the
# stories; pgbench's random_zipfian reads low story ids most, the same ones
SCHEMA = """
CREATE TABLE users (id int PRIMARY KEY, nickname text NOT NULL, rating int NOT NULL,
                    creation_date timestamptz NOT NULL);
CREATE TABLE stories (id int PRIMARY KEY, title text NOT NULL, body text NOT NULL, date timestamptz NOT NULL,
                      writer int NOT NULL REFERENCES users, category int NOT NULL, nb_comments int NOT NULL);
CREATE TABLE comments (id int PRIMARY KEY, writer int NOT NULL, story_id int NOT NULL REFERENCES stories,
                       parent int NOT NULL, date timestamptz NOT NULL, rating int NOT NULL, subject text NOT NULL,
                       comment text NOT NULL);
INSERT INTO users SELECT i, 'user' || i, (random() * 10)::int, now() - random() * interval '1000 days'
  FROM generate_series(1, %(users)s) i;
INSERT INTO stories SELECT i, 'story ' || md5(i::text), repeat('lorem ipsum ', 20 + i %% 40),
       now() - (i::float8 / %(stories)s) * interval '365 days',
       1 + floor(%(users)s * power(random(), 3))::int, 1 + i %% %(categories)s, 0
  FROM generate_series(1, %(stories)s) i;
INSERT INTO comments SELECT i, 1 + floor(%(users)s * power(random(), 3))::int,
       1 + floor(%(stories)s * power(random(), 4))::int, 0, now() - random() * interval '365 days',
       (random() * 5)::int, 'subject ' || (random() * 1e6)::int, repeat('comment text ', 5 + i %% 20)
  FROM generate_series(1, %(comments)s) i;
UPDATE stories s SET nb_comments = c.n FROM (SELECT story_id, count(*) AS n FROM comments GROUP BY 1) c
  WHERE c.story_id = s.id;
CREATE INDEX ON stories (date);
CREATE INDEX ON stories (category, date);
CREATE INDEX ON stories (writer);
CREATE INDEX ON comments (story_id, date);
"""

# page -> (weight, script). \\sleep :think ms ends each page: the client's latency less think_ms is the
# page's (mwinv/ntier/analyse.py). The search's prefix is 'subject NNN': 1 in 900 subjects match, ~110
# of 100,000 comments, which a scan of all of them finds.
PAGES = {
    "story": (40, """\\set sid random_zipfian(1, :stories, 1.1)
SELECT s.title, s.body, s.date, u.nickname FROM stories s JOIN users u ON u.id = s.writer WHERE s.id = :sid;
SELECT c.id, c.subject, c.date, u.nickname FROM comments c JOIN users u ON u.id = c.writer
  WHERE c.story_id = :sid ORDER BY c.date LIMIT 20;
"""),
    "front": (30, """SELECT s.id, s.title, s.date, s.nb_comments FROM stories s ORDER BY s.date DESC LIMIT 20;
"""),
    "category": (20, """\\set cat random(1, %(categories)d)
\\set page random_exponential(0, 9, 2.0)
SELECT s.id, s.title, s.date FROM stories s WHERE s.category = :cat ORDER BY s.date DESC LIMIT 20 OFFSET :page * 20;
"""),
    "user": (9, """\\set uid random_zipfian(1, :users, 1.1)
SELECT u.nickname, u.rating, u.creation_date FROM users u WHERE u.id = :uid;
SELECT s.id, s.title FROM stories s WHERE s.writer = :uid ORDER BY s.date DESC LIMIT 10;
"""),
    "search": (1, """\\set p random(100, 999)
SELECT c.id, c.subject, c.date FROM comments c WHERE c.subject LIKE 'subject :p%%' ORDER BY c.date DESC
  LIMIT 20 OFFSET 40;
"""),
}


def load(server, size: Size) -> None:
    """The database, schema and data on the primary (its replicas copy it)."""
    server.psql(f"CREATE DATABASE {DATABASE}")
    with server.connect(DATABASE) as conn:
        conn.execute(SCHEMA % {"users": size.users, "stories": size.stories, "comments": size.comments,
                               "categories": CATEGORIES})
        conn.execute("VACUUM ANALYZE")


def write_scripts(directory: Path, think_ms: float) -> list[tuple[str, Path, int]]:
    """One pgbench script per page in directory: [(page, file, weight)]."""
    out = []
    for page, (weight, body) in PAGES.items():
        f = privfile.write(directory / f"{page}.sql", body % {"categories": CATEGORIES} + f"\\sleep {think_ms:g} ms\n")
        out.append((page, f, weight))
    return out
