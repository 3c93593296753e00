/** `engram context <id> --budget N`: the context BuildConversationContext assembles for the next model call. */
import { Command } from "commander";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { positiveInt, printJson } from "../output.js";

interface ContextOptions extends ConnectionOptions {
  budget?: number;
  maxEvents?: number;
  query?: string;
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("context")
      .description("the context window BuildConversationContext assembles for a session")
      .argument("<session-id>", "the session")
      .option("--budget <tokens>", "most tokens the messages may take (token_budget)", positiveInt("--budget"))
      .option("--max-events <n>", "newest events to consider (max_events)", positiveInt("--max-events"))
      .option("--query <text>", "rank items by relevance to this text"),
  ).action(async (sessionId: string, opts: ContextOptions) => {
    const memory = await connect(opts);
    try {
      const res = await memory.rpc.buildConversationContext(
        { sessionId, tokenBudget: opts.budget ?? 0, maxEvents: opts.maxEvents ?? 0, query: opts.query ?? "" },
        { timeoutMs: opts.timeout },
      );
      if (opts.json) {
        const [{ toJson }, { pb }] = await Promise.all([import("@bufbuild/protobuf"), import("@engram-memory/client")]);
        printJson(
          toJson(pb.BuildConversationContextResponseSchema, res, { useProtoFieldName: true, alwaysEmitImplicit: true }),
        );
        return;
      }
      process.stdout.write(res.text ? `${res.text}\n` : "");
      const tokens = res.tokenizer ? `, ${res.tokensUsed} tokens (${res.tokenizer})` : "";
      process.stderr.write(
        `-- ${res.eventsIncluded} events included, ${res.eventsDropped} dropped${tokens}, ${res.messages.length} messages\n`,
      );
    } finally {
      memory.close();
    }
  });
}
