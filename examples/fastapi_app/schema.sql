-- The service's own table (txqueue's are made by App.init() at start-up).
CREATE TABLE orders (
    id            serial PRIMARY KEY,
    total         int NOT NULL,
    receipt_sent  boolean NOT NULL DEFAULT false
);
