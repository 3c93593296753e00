-- Engram schema, version 2: API keys (src/auth/postgres-key-store.ts).
-- Only the SHA-256 of each key is stored; `id` is the public part of the key.
CREATE TABLE IF NOT EXISTS api_keys (
  id         text COLLATE "C" PRIMARY KEY,
  hash       text NOT NULL,
  role       text NOT NULL CHECK (role IN ('read', 'write', 'admin')),
  apps       text[] NOT NULL,
  user_id    text,
  name       text,
  rate_limit integer CHECK (rate_limit >= 0),
  created_at timestamptz NOT NULL,
  revoked_at timestamptz
);

-- Per-key call counters of the rate limiter (rate-limiter-flexible's
-- RateLimiterPostgres layout), shared by every replica: one row per key.
CREATE TABLE IF NOT EXISTS rate_limits (
  key    varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
