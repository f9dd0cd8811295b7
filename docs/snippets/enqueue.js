// enqueue.js: a task from Node.js, in the transaction that writes the order (npm install pg).
const { Client } = require("pg");

async function main() {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    await client.query("BEGIN");
    const order = await client.query(
      "INSERT INTO orders (email, total_cents) VALUES ($1, $2) RETURNING id",
      ["bob@example.com", 1999],
    );
    const task = await client.query(
      "SELECT txqueue_enqueue('send_invoice', $1::jsonb, queue => 'emails') AS id",
      [JSON.stringify({ order: order.rows[0].id })],
    );
    await client.query("COMMIT");
    console.log(task.rows[0].id);
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  } finally {
    await client.end();
  }
}

main().catch((error) => {
  console.error(error.message);
  process.exit(1);
});
