// PasswordEncoderPeer.java - the JDK side of test_zk_password: encodes and decodes passwords with
// javax.crypto the way Kafka 3.9's EncryptingPasswordEncoder does (same string format, same JCE
// calls), so the C encoder is checked against the real Java crypto rather than against itself.
//
// Single-file source mode:  java tests/support/PasswordEncoderPeer.java < commands
// One command a line, fields separated by one space; text fields are base64 of UTF-8, so any
// password or secret passes whatever the locale:
//   ping                                                       -> OK
//   encode SECRET KEYFACTORY|- CIPHER KEYLENGTH ITERATIONS PLAIN   -> OK base64(encoded)
//       KEYFACTORY "-": unset, i.e. Kafka's default (PBKDF2WithHmacSHA512 on any current JDK)
//   decode SECRET CIPHER ENCODED                               -> OK base64(plain)
//       CIPHER is the decoding broker's own password.encoder.cipher.algorithm: like Kafka, it
//       (not the stored cipherAlgorithm) decides whether IV or GCM parameters are read.
// A failure prints "ERR <exception>" and the next line is read.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.AlgorithmParameters;
import java.security.SecureRandom;
import java.security.spec.AlgorithmParameterSpec;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.StringJoiner;
import javax.crypto.Cipher;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

public class PasswordEncoderPeer {
    private static final SecureRandom RANDOM = new SecureRandom();

    private static String text(String b64) {
        return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8);
    }

    private static String b64(byte[] bytes) {
        return Base64.getEncoder().encodeToString(bytes);
    }

    private static String b64(String s) {
        return b64(s.getBytes(StandardCharsets.UTF_8));
    }

    private static boolean gcm(String cipher) {
        return cipher.startsWith("AES/GCM/");
    }

    // PBEKeySpec hands the secret's chars to the factory, which hashes their UTF-8.
    private static SecretKeySpec key(String secret, String factory, String cipher, int keyLength, byte[] salt,
                                     int iterations) throws Exception {
        byte[] raw = SecretKeyFactory.getInstance(factory)
            .generateSecret(new PBEKeySpec(secret.toCharArray(), salt, iterations, keyLength)).getEncoded();
        int slash = cipher.indexOf('/');
        return new SecretKeySpec(raw, slash > 0 ? cipher.substring(0, slash) : cipher);
    }

    private static String encode(String secret, String factory, String cipherName, int keyLength, int iterations,
                                 String plain) throws Exception {
        String kf = factory.equals("-") ? "PBKDF2WithHmacSHA512" : factory;
        byte[] salt = new byte[256];
        RANDOM.nextBytes(salt);
        Cipher cipher = Cipher.getInstance(cipherName);
        cipher.init(Cipher.ENCRYPT_MODE, key(secret, kf, cipherName, keyLength, salt, iterations));
        byte[] encrypted = cipher.doFinal(plain.getBytes(StandardCharsets.UTF_8));
        // A HashMap filled in this order, as Kafka's is: its iteration order is Kafka's field order.
        Map<String, String> fields = new HashMap<>();
        fields.put("keyFactoryAlgorithm", kf);
        fields.put("cipherAlgorithm", cipherName);
        fields.put("keyLength", String.valueOf(keyLength));
        fields.put("salt", b64(salt));
        fields.put("iterations", String.valueOf(iterations));
        fields.put("encryptedPassword", b64(encrypted));
        fields.put("passwordLength", String.valueOf(plain.length()));
        AlgorithmParameters params = cipher.getParameters();
        if (gcm(cipherName)) {
            GCMParameterSpec spec = params.getParameterSpec(GCMParameterSpec.class);
            fields.put("initializationVector", b64(spec.getIV()));
            fields.put("authenticationTagLength", String.valueOf(spec.getTLen()));
        } else {
            fields.put("initializationVector", b64(params.getParameterSpec(IvParameterSpec.class).getIV()));
        }
        StringJoiner out = new StringJoiner(",");
        fields.forEach((k, v) -> out.add(k + ":" + v));
        return out.toString();
    }

    // Kafka's CSV map: split at commas with the whitespace around them, each piece at its last ':'.
    private static Map<String, String> parse(String encoded) {
        Map<String, String> map = new HashMap<>();
        if (encoded.isEmpty())
            return map;
        for (String piece : encoded.split("\\s*,\\s*")) {
            int colon = piece.lastIndexOf(':');
            map.put(piece.substring(0, colon).trim(), piece.substring(colon + 1).trim());
        }
        return map;
    }

    private static String decode(String secret, String configuredCipher, String encoded) throws Exception {
        Map<String, String> f = parse(encoded);
        String kf = f.getOrDefault("keyFactoryAlgorithm", "PBKDF2WithHmacSHA512");
        String cipherName = f.get("cipherAlgorithm");
        int keyLength = Integer.parseInt(f.get("keyLength"));
        byte[] salt = Base64.getDecoder().decode(f.get("salt"));
        int iterations = Integer.parseInt(f.get("iterations"));
        byte[] encrypted = Base64.getDecoder().decode(f.get("encryptedPassword"));
        int length = Integer.parseInt(f.get("passwordLength"));
        byte[] iv = Base64.getDecoder().decode(f.get("initializationVector"));
        AlgorithmParameterSpec spec = gcm(configuredCipher)
            ? new GCMParameterSpec(Integer.parseInt(f.get("authenticationTagLength")), iv)
            : new IvParameterSpec(iv);
        Cipher cipher = Cipher.getInstance(cipherName);
        cipher.init(Cipher.DECRYPT_MODE, key(secret, kf, cipherName, keyLength, salt, iterations), spec);
        String plain = new String(cipher.doFinal(encrypted), StandardCharsets.UTF_8);
        if (plain.length() != length)
            throw new IllegalStateException("password length check failed");
        return plain;
    }

    private static String run(String[] a) throws Exception {
        switch (a[0]) {
            case "ping":
                return "";
            case "encode":
                return b64(encode(text(a[1]), a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]), text(a[6])));
            case "decode":
                return b64(decode(text(a[1]), a[2], text(a[3])));
            default:
                throw new IllegalArgumentException("unknown command " + a[0]);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            try {
                String r = run(line.split(" ", -1));
                out.append(r.isEmpty() ? "OK" : "OK " + r).append('\n');
            } catch (Exception e) {
                out.append("ERR ").append(String.valueOf(e).replace('\n', ' ')).append('\n');
            }
        }
        System.out.print(out);
        System.out.flush();
    }
}
