-- The other side of a reset or a drop: the API finds evidence another node
-- holds about the same flow by its endpoints ("addr:port" strings as the
-- agent sends them) and time. One index serves both orientations of a
-- flow (src/dst as given, and swapped), each an equality on both columns
-- and a range on ts; events without endpoints (no readable headers) stay
-- out of it.
CREATE INDEX events_flow ON events ((fields->>'src'), (fields->>'dst'), ts)
    WHERE fields ? 'src';
