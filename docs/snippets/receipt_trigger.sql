-- receipt_trigger.sql: every order inserted, by any program, enqueues its receipt in the
-- same transaction.
CREATE TABLE orders (id bigserial PRIMARY KEY, email text NOT NULL, total_cents integer);

CREATE FUNCTION enqueue_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM txqueue_enqueue('send_receipt', jsonb_build_object('order', NEW.id),
                            queue => 'emails');
    RETURN NEW;
END
$$;

CREATE TRIGGER orders_receipt AFTER INSERT ON orders
FOR EACH ROW EXECUTE FUNCTION enqueue_receipt();
