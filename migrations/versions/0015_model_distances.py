"""embedding models by distance: cosine, L2 or inner product

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29

Searches ranked by cosine distance only. A model is now its name, dimension and distance
(``embedding_models.distance``: ``cosine``, ``l2`` or ``inner_product``, LangGraph's names): each is a
row of its own, with its own vectors and its own HNSW index, built at run time with the operator class of
its distance (``vector_l2_ops``, ``halfvec_ip_ops``…). Existing models are ``cosine``, as they were
searched; their rows, vectors and indexes stay. The column has a constant default: adding it rewrites
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPGRADE = """
ALTER TABLE pgmem.embedding_models ADD COLUMN distance text NOT NULL DEFAULT 'cosine';
ALTER TABLE pgmem.embedding_models ADD CONSTRAINT embedding_models_distance_check
    CHECK (distance IN ('cosine', 'l2', 'inner_product'));
COMMENT ON COLUMN pgmem.embedding_models.distance IS
    'what searches rank by: cosine, l2 or inner_product (the HNSW index''s operator class)';
DROP INDEX IF EXISTS pgmem.embedding_models_definition_key;  -- absent where 0005 ran as a placeholder
CREATE UNIQUE INDEX embedding_models_definition_key ON pgmem.embedding_models (name, dimension, distance);
"""

# A model of another distance has no place at 0014 (its vectors would be searched by cosine, and its name
# and dimension may collide with a cosine model's): the downgrade refuses while one exists.
_DOWNGRADE = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgmem.embedding_models WHERE distance <> 'cosine') THEN
        RAISE EXCEPTION 'embedding models of distance l2 or inner_product exist: delete them (and their vectors) '
                        'before downgrading below revision 0015';
    END IF;
END $$;
DROP INDEX pgmem.embedding_models_definition_key;
CREATE UNIQUE INDEX embedding_models_definition_key ON pgmem.embedding_models (name, dimension);
ALTER TABLE pgmem.embedding_models DROP CONSTRAINT embedding_models_distance_check;
ALTER TABLE pgmem.embedding_models DROP COLUMN distance;
"""


def upgrade() -> None:
    op.execute(_UPGRADE)


def downgrade() -> None:
    op.execute(_DOWNGRADE)
