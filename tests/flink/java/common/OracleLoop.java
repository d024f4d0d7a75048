package offsetaudit.flinktest;

import java.io.OutputStream;
import java.io.PrintStream;

/**
 * StateOracle over several checkpoint or savepoint directories in this one JVM, for the decode
 * benchmark: argv[0] passes over argv[1..]; prints "read PASS PATH MILLIS" per read (the oracle's
 * own JSON is discarded), so the first read shows the JVM's warm-up and later passes its steady pace.
 */
public final class OracleLoop {
    public static void main(String[] argv) throws Exception {
        int passes = Integer.parseInt(argv[0]);
        PrintStream out = System.out;
        PrintStream discard = new PrintStream(OutputStream.nullOutputStream());
        for (int pass = 0; pass < passes; pass++) {
            for (int i = 1; i < argv.length; i++) {
                long start = System.nanoTime();
                System.setOut(discard);
                try {
                    StateOracle.main(new String[] {argv[i]});
                } finally {
                    System.setOut(out);
                }
                out.println("read " + pass + " " + argv[i] + " " + (System.nanoTime() - start) / 1e6);
            }
        }
    }
}
